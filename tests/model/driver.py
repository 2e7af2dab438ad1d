"""How the model reaches the database: a clean start, a worker's claim and execution on the
test's thread, and what the model reads back after each step.

The worker is the one ``runjobs`` runs (``runtime.worker.Worker``, thread pool), driven by hand:
its producer claims (``claim_if_room``: the restore watch's choice of statement, the pause),
the claimed jobs are taken from its pool's buffer, started through the pool's one start path
(``ExecutorPool._start``: the hold-back and restore checks, a start-by deadline ending a job
past it, then the worker's own ``_execute``), and the outcome is decided and written
by the worker's outcome code (``runtime.outcomes.record``), as ``testing.run_one`` does. Nothing
of it runs on another thread. The process pool runs handlers in child processes and cannot be
driven this way: the model covers the thread path.

A fresh ``Worker`` per claim: its restore watch then asks the database at the execution (a
worker's cached "no hold" answer stands for ``RECHECK`` seconds by design, which a model that
declares a hold between two steps would otherwise meet).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from django.apps import apps
from django.db import connection

from django_jobs.runtime import outcomes
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.pool import Held
from django_jobs.runtime.worker import Worker
from tests.model.shapes import QUEUES

_workers = itertools.count(1)


def clean_database() -> None:
    """Every table of the jobs and of the test project's apps, emptied (ids keep counting)."""
    tables = [
        model._meta.db_table
        for label in ("django_jobs", "testjobs")
        for model in apps.get_app_config(label).get_models()
    ]
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")


@dataclass
class InFlight:
    """A job a worker claimed and has not executed yet."""

    worker: Worker
    held: Held

    @property
    def job_id(self) -> int:
        return self.held.claim.id


def claim(queues: tuple[str, ...] = QUEUES) -> list[InFlight]:
    """A worker of ``queues`` looks (restore watch) and claims at most one job."""
    worker = Worker(
        queues=list(queues), concurrency=1, burst=True, schedules=False, worker_id=f"model:{next(_workers)}"
    )
    worker._restore_watch.run_once()
    worker._producer.claim_if_room()
    return [InFlight(worker, held) for held in worker._pool.take_buffered()]


def execute(flight: InFlight) -> Finished:
    """Start the claimed job as the worker's slot would, and write its outcome."""
    finished = flight.worker._pool._start(0, flight.held)
    written = outcomes.record([finished], worker_id=flight.worker.worker_id)
    outcomes.announce([finished], written, flight.worker.worker_id)
    return finished
