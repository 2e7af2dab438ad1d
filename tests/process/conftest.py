"""Fixtures of the tests that run real worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.process.workers import StartWorker, WorkerProcess


@pytest.fixture
def start_worker(worker_env: dict[str, str]) -> Iterator[StartWorker]:
    """Start ``manage.py runjobs`` processes (``env`` overrides settings); each is cleaned up
    after the test, whatever state it was left in."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess({**worker_env, **(env or {})}, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
