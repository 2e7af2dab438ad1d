"""A project whose ``TASKS`` names ``JobsBackend`` while ``INSTALLED_APPS`` lacks
``"django_jobs"``, run as a real process: ``manage.py check`` says so (``django_jobs.E060``)
instead of crashing on the import of a model of an app that is not installed, and an enqueue
that runs anyway raises a clear ``ImproperlyConfigured`` and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.process.workers import ROOT

NOT_INSTALLED = "TASKS['default'] uses JobsBackend, but django_jobs is not in INSTALLED_APPS"


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings", "DJANGO_JOBS_NOT_INSTALLED": "1"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_check_names_the_missing_app_when_tasks_uses_the_backend_without_it() -> None:
    result = _manage("check")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "SystemCheckError" in result.stderr
    assert f"(django_jobs.E060) {NOT_INSTALLED}" in result.stderr
    assert "Add 'django_jobs' to INSTALLED_APPS" in result.stderr


def test_an_enqueue_without_the_app_is_refused_clearly() -> None:
    script = (
        "from django.core.exceptions import ImproperlyConfigured\n"
        "try:\n"
        "    from testproject.bare.tasks import welcome\n"
        "    welcome.enqueue(1)\n"
        "except ImproperlyConfigured as exc:\n"
        "    print('refused:', exc)\n"
    )
    result = _manage("shell", "-c", script)

    assert result.returncode == 0, result.stdout + result.stderr
    assert f"refused: {NOT_INSTALLED}; nothing was enqueued. Add 'django_jobs'" in result.stdout
