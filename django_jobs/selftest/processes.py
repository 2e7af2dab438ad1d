"""The self-test's worker processes, from the side of the run that starts and signals them.

Each is the project's own ``manage.py`` (or ``django-admin``, or ``python -m django``: the
program this process was started as), run again as ``jobsselftest --worker NAME``, with the
same settings module and environment: the workers load the project's settings, apps and job
types exactly as ``runjobs`` would, and ``worker_role`` then gives them the self-test's lease
and serves only its queue. Each runs in a session of its own, so that a Ctrl-C meant for the
self-test reaches the self-test alone, which then stops its workers itself. Its output goes
to a file of its own; the last lines are shown when something went wrong.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django_jobs.selftest.jobs import worker_id


def launcher() -> list[str]:
    """The command line that starts this program again: the same interpreter, the same
    ``manage.py`` (or django-admin), or ``-m django``."""
    main = sys.argv[0] if sys.argv else ""
    if not main or Path(main).name == "__main__.py":
        return [sys.executable, "-m", "django"]
    return [sys.executable, str(Path(main).resolve())]


def environment() -> dict[str, str]:
    """This process's environment (``DJANGO_SETTINGS_MODULE`` included, which ``--settings``
    sets), with the directory it imported the project from first on the path: manage.py's own,
    or the one ``--pythonpath`` gave."""
    first = os.path.abspath(sys.path[0] or os.getcwd()) if sys.path else os.getcwd()
    path = os.pathsep.join(p for p in (first, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


class WorkerProcess:
    """One worker of a run: ``name`` (A, B or C) serving ``queue`` with ``slots`` slots."""

    def __init__(self, *, name: str, run: str, queue: str, lease: float, slots: int) -> None:
        self.name = name
        self.worker_id = worker_id(run, name)
        #: What the run did to it: "running", "killed", "frozen" or "stopping".
        self.state = "running"
        self._dir = Path(tempfile.mkdtemp(prefix=f"jobsselftest-{run}-{name}-"))
        self.log = self._dir / "worker.log"
        self._stats = self._dir / "stats.json"
        command = [
            *launcher(), "jobsselftest", "--worker", name, "--run", run, "--queue", queue,
            "--lease", repr(lease), "--slots", str(slots), "--stats-file", str(self._stats),
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=environment(),
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def label(self) -> str:
        return f"worker {self.name} (pid {self.pid})"

    def exited(self) -> int | None:
        """Its exit status, or None while it runs (or is frozen)."""
        return self.process.poll()

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is released; its jobs are left to their leases."""
        self.state = "killed"
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP: every thread stops where it is, heartbeat included, for as long as it lasts."""
        self.state = "frozen"
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.state = "running"
        self.process.send_signal(signal.SIGCONT)

    def stop(self, timeout: float) -> int:
        """SIGTERM, as a deployment stops a worker: it finishes what it runs, then exits."""
        self.state = "stopping"
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def summary(self) -> dict[str, Any] | None:
        """What it wrote of itself on exit (``WorkerStats.summary()``), or None."""
        try:
            found: dict[str, Any] = json.loads(self._stats.read_text())
        except (OSError, ValueError):
            return None
        return found

    def tail(self, lines: int = 15) -> str:
        """The last lines of its output."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def discard(self) -> None:
        """Make sure it is gone (continued first, if frozen: a stopped process takes a SIGKILL
        too, but says nothing of it until continued), and remove its files."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)
                self.process.send_signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        shutil.rmtree(self._dir, ignore_errors=True)
