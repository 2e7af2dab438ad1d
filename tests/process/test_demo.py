"""The README's demo command: a realistic mix of jobs settles as the summary says."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.process.workers import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_demo_settles_every_job_and_prints_the_summary(worker_env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "rundemo", "--timeout", "90"],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = {
        line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.startswith("demo.")
    }
    # columns: completed, failed, events
    assert lines["demo.send_welcome_email"][:2] == ["40", "0"]
    assert lines["demo.sync_crm_contact"][:2] == ["6", "0"]  # after two 503s each
    assert lines["demo.charge_invoice"][:2] == ["4", "0"]  # after a 429 with Retry-After each
    assert lines["demo.generate_report"][:2] == ["5", "2"]  # two invalid payloads fail at once
    assert lines["demo.import_legacy_file"][:2] == ["0", "1"]  # the poison job exhausts its attempts
    assert "Invoices paid: 4 of 4" in result.stdout
    assert "All demo jobs settled" in result.stdout
    assert "/admin/django_jobs/job/" in result.stdout
