from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from testproject.demo.provider import FakeProvider

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def db_now() -> Callable[[], object]:
    """The database's clock: every time the system stores comes from it."""

    def now() -> object:
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]

    return now


@pytest.fixture
def worker_env() -> dict[str, str]:
    """Environment for `manage.py runjobs` subprocesses: the test database, fast polling."""
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {**os.environ, "DATABASE_URL": url, "DJANGO_JOBS_POLL_INTERVAL": "0.05", "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def runjobs(worker_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `manage.py runjobs ARGS` as a real subprocess and wait for it."""

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "runjobs", *args],
            cwd=ROOT,
            env=worker_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """The fake external provider on 127.0.0.1, known to in-process and subprocess workers."""
    fake = FakeProvider().start()
    monkeypatch.setenv("DEMO_PROVIDER_URL", fake.url)
    yield fake
    fake.stop()
