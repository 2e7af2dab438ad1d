"""A process in which no OpenTelemetry provider can be set does not import the API to find none;
one in which a provider is set, by code or by the environment, traces and records as before.

Each case runs in a fresh interpreter: whether a module was imported is a fact of the process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ASK = """
import json, sys
import django
django.setup()
{before}
from django_jobs.observe import metrics, tracing
found = {{"traced": tracing.enabled(), "metered": metrics.otel_recorder() is not None}}
found["imported"] = sorted(m for m in ("opentelemetry.trace", "opentelemetry.metrics") if m in sys.modules)
print(json.dumps(found))
"""

SET_IN_CODE = """
from opentelemetry import metrics as otel_metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
otel_metrics.set_meter_provider(MeterProvider())
"""


def ask(before: str = "", **env: str) -> dict[str, object]:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "DJANGO_SETTINGS"))
    }
    environment.update(DJANGO_SETTINGS_MODULE="testproject.settings", **env)
    done = subprocess.run(
        [sys.executable, "-c", ASK.format(before=before)],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_without_a_provider_the_api_is_not_imported() -> None:
    assert ask() == {"traced": False, "metered": False, "imported": []}


@pytest.mark.parametrize("where", ["code", "environment"])
def test_a_provider_set_in_code_or_named_in_the_environment_is_used(where: str) -> None:
    if where == "code":
        found = ask(SET_IN_CODE)
    else:
        found = ask(
            OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider", OTEL_PYTHON_METER_PROVIDER="sdk_meter_provider"
        )
    assert found == {
        "traced": True,
        "metered": True,
        "imported": ["opentelemetry.metrics", "opentelemetry.trace"],
    }
