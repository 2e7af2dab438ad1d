"""The README's demo command: a realistic mix of jobs settles as the summary says, every time
it is run on the same database."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.process.workers import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def run_demo(worker_env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", "rundemo", "--timeout", "90"],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def assert_the_documented_result(output: str) -> None:
    lines = {line.split()[0]: line.split()[1:] for line in output.splitlines() if line.startswith("demo.")}
    # columns: completed, failed, events
    assert lines["demo.send_welcome_email"][:2] == ["40", "0"]
    assert lines["demo.sync_crm_contact"][:2] == ["6", "0"]  # after two 503s each
    assert lines["demo.charge_invoice"][:2] == ["4", "0"]  # after a 429 with Retry-After each
    assert lines["demo.generate_report"][:2] == ["5", "2"]  # two invalid payloads fail at once
    assert lines["demo.import_legacy_file"][:2] == ["0", "1"]  # the poison job exhausts its attempts
    assert "Invoices paid: 4 of 4" in output
    assert "All demo jobs settled" in output
    assert "/admin/django_jobs/job/" in output


def test_demo_settles_every_job_and_prints_the_summary_every_time_it_is_run(
    worker_env: dict[str, str],
) -> None:
    # Run after run on the same database, as a reader who tries the README's first command
    # again does: the earlier runs' invoices, charges and emails are still there. Three runs,
    # since ids that restart with each run collided with the earlier ones by the second or third.
    for run in range(3):
        output = run_demo(worker_env)
        assert "IntegrityError" not in output, f"run {run + 1}"
        assert_the_documented_result(output)
