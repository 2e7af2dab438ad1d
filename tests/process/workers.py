"""Real `manage.py runjobs` processes for crash tests: start, signal, wait, read their logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Sub-second leases so that a lost worker is noticed within a test's patience.
FAST_LEASES = {
    "DJANGO_JOBS_LEASE_TIMEOUT": "1.0",
    "DJANGO_JOBS_HEARTBEAT_INTERVAL": "0.2",
    "DJANGO_JOBS_REAPER_INTERVAL": "0.3",
    "DJANGO_JOBS_POLL_INTERVAL": "0.05",
    "DJANGO_JOBS_LOG_LEVEL": "INFO",
}


class WorkerProcess:
    def __init__(self, env: dict[str, str], *args: str, prefix: Sequence[str] = ()) -> None:
        """``prefix`` runs the worker through a command (``ip netns exec NAME``, say)."""
        self._log = tempfile.NamedTemporaryFile(prefix="runjobs-", suffix=".log", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "manage.py", "runjobs", *args],
            cwd=ROOT,
            env={**FAST_LEASES, **env},  # the caller may override a setting
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a signal for the test runner never reaches the worker
        )
        self._log.close()  # the worker writes through its own descriptor; output() reads by name

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is released, the lease is all that is left."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def wait(self, timeout: float = 20) -> int:
        return self.process.wait(timeout=timeout)

    def output(self) -> str:
        return Path(self._log.name).read_text()

    def stop(self) -> None:
        """Clean up whatever state the test left the process in."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        os.unlink(self._log.name)


def wait_for(condition: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def listening_workers() -> int:
    """Worker connections of the test database LISTENing for jobs (their last statement)."""
    from django.db import connection

    from django_jobs.runtime.listener import CHANNEL

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {CHANNEL}"],
        )
        return int(cursor.fetchone()[0])


#: The ``start_worker`` fixture (tests/process/conftest.py): starts a worker with these
#: arguments, cleaned up after the test.
StartWorker = Callable[..., WorkerProcess]
