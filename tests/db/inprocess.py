"""Real workers on threads of the test process: the same Worker that `runjobs` runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from django.db import connections

from django_jobs.runtime.worker import Worker


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def run_worker(**kwargs: object) -> Worker:
    worker = Worker(burst=True, **kwargs)  # type: ignore[arg-type]
    worker.run()
    return worker


class BackgroundWorker:
    """A worker on a thread of this process, stopped like a SIGTERM would stop it."""

    def __init__(self, **kwargs: object) -> None:
        self.worker = Worker(**kwargs)  # type: ignore[arg-type]
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            self.worker.run()
        finally:
            connections.close_all()

    def __enter__(self) -> Worker:
        self.thread.start()
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(timeout=10)
