"""A project whose ``TASKS`` names ``JobsBackend`` while ``INSTALLED_APPS`` lacks
``"django_jobs"``: ``manage.py check``, run as a real process, says so (``django_jobs.E060``)
instead of crashing on the import of a model of an app that is not installed."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.process.workers import ROOT


def test_check_names_the_missing_app_when_tasks_uses_the_backend_without_it() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings", "DJANGO_JOBS_NOT_INSTALLED": "1"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "SystemCheckError" in result.stderr
    assert (
        "(django_jobs.E060) TASKS['default'] uses JobsBackend, but django_jobs is not in INSTALLED_APPS"
        in result.stderr
    )
    assert "Add 'django_jobs' to INSTALLED_APPS" in result.stderr
