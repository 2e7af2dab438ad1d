"""Helpers for your own tests: run queued jobs now, and see what a block of code enqueued.

- :func:`run_one` claims one job and runs it on the calling thread, on the jobs database's
  connection, through the worker's own claim, executor and outcome writer: it works inside a
  ``TestCase`` (everything happens in the test's transaction) as well as outside one.
- :func:`run_jobs` runs a real burst worker, on threads with their own connections: it needs
  committed jobs (``TransactionTestCase``); :func:`run_until_settled` runs either way.
- Durable jobs (docs/durable-jobs.md; from ``django_jobs.testing_durable``, but this one):
  :func:`run_durable` runs a job to its next sleep or wait, :func:`wake` ends its sleep,
  :func:`deliver` sends it a signal, :func:`where` says where it is parked, and
  :func:`assert_steps` / :func:`recorded_steps` check what it recorded.
- :func:`enqueued_jobs` records what a block enqueues, and keeps it out of the queue;
  :func:`assert_enqueued` checks what it recorded, with a message that lists what was
  enqueued instead (both from ``django_jobs.recording``).
- Stepping a worker by hand, for a suite that checks the worker's contract itself (from
  ``django_jobs.stepping``): :func:`claim` takes the job a worker would take next without
  running it and returns a :class:`Claimed`; :func:`renew`, :func:`report_progress` and
  :func:`save_checkpoint` write as the running execution; :func:`context` is its ``JobContext``
  for calling a handler yourself; :func:`complete`, :func:`retry`, :func:`fail` and
  :func:`give_back` record its outcome through the worker's outcome writer. Each write is fenced
  by the execution: once the job was taken from it, nothing lands and the call says so.
- :func:`queue_rows` reads the queues' figures as the dashboard shows them;
  :func:`capture_statements` records the SQL a block runs, the worker's hot statements included,
  through Django's execute wrappers (from ``django_jobs.statement_capture``).

Every name in ``__all__`` is public: kept, with its behaviour, across 1.x.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.db import connections
from django.db.models import DateTimeField, F, Func, Min, QuerySet
from psycopg.pq import TransactionStatus

from django_jobs import signals, stepping
from django_jobs.conf import jobs_settings
from django_jobs.models import Job
from django_jobs.reads.queues import QueueRow, queue_rows
from django_jobs.recording import EnqueuedJob, EnqueuedJobs, assert_enqueued, enqueued_jobs
from django_jobs.runtime import outcomes
from django_jobs.runtime.executor import run
from django_jobs.runtime.pool import end_if_expired
from django_jobs.runtime.started import send_job_started
from django_jobs.runtime.worker import Worker, WorkerStats
from django_jobs.statement_capture import CapturedStatements, Statement, capture_statements
from django_jobs.states import ACTIVE_STATUSES, JobStatus
from django_jobs.stepping import (
    Claimed,
    Renewal,
    claim,
    complete,
    context,
    fail,
    give_back,
    renew,
    report_progress,
    retry,
    save_checkpoint,
)
from django_jobs.testing_durable import assert_steps, deliver, recorded_steps, wake, where
from django_jobs.transitions import Claim


def run_one(queues: Sequence[str] | None = None, types: Sequence[str] | None = None) -> Job | None:
    """Claim at most one claimable job and run it here; return the job as it ended, or None.

    The job is the one a worker would claim next (``Job.objects.claimable(queues, types)``
    lists them in that order); while a restore hold is open, jobs of types that may act outside
    the database wait, as they do for a worker. It is claimed by the worker's claim statement, run by the
    worker's executor on the calling thread and on the jobs database's connection, and its
    outcome is decided and written by the worker's outcome writer, from this thread: all of it
    inside the caller's transaction, if there is one (a ``TestCase``). The handler's writes
    are the caller's to see; a database error in the handler rolls back the handler's writes
    only (a savepoint), so that its outcome can still be written.

    A ``BaseException`` that is not an ``Exception`` (``SystemExit``, ``KeyboardInterrupt``)
    propagates from the handler, and nothing more is written: the job stays ``running`` until
    its lease expires and the reaper decides, as after a crash. ``job_started`` and
    ``job_finished`` are sent after the commit (see ``django_jobs.signals``).
    """
    alias = jobs_settings.DATABASE
    claimed = stepping.claim(queues, types, worker_id=_WORKER_ID)
    if claimed is None:
        return None
    taken, lease = claimed._claim, claimed._lease
    if taken.has_deadline and end_if_expired(taken, lease) is not None:  # as a worker's start
        return Job.objects.using(alias).get(id=taken.id)
    _announce_start(alias, taken)
    with _handler_savepoint(alias):
        finished = run(taken, lease, reraise_base=True)
    written = outcomes.record([finished])
    outcomes.announce([finished], written, _WORKER_ID)
    return Job.objects.using(alias).get(id=taken.id)


def run_jobs(queues: Sequence[str] | None = None, concurrency: int = 1) -> WorkerStats:
    """Run a burst worker: every job claimable now is executed; retries scheduled later wait.

    The worker's threads use their own connections, so use a transactional test
    (``@pytest.mark.django_db(transaction=True)`` or ``TransactionTestCase``); in a ``TestCase``,
    use :func:`run_one` or ``run_until_settled(in_thread=True)``.
    """
    worker = Worker(queues=queues, concurrency=concurrency, burst=True, grace=5.0)
    worker.run()
    return worker.stats


def run_until_settled(
    queues: Sequence[str] | None = None,
    concurrency: int = 1,
    timeout: float = 30.0,
    *,
    in_thread: bool = False,
) -> None:
    """Run jobs until no job is waiting, pending or running, waiting out retry backoffs: a
    workflow runs to its end, callbacks included.

    With ``in_thread``, one job at a time by :func:`run_one`, on this thread (a ``TestCase``
    works); otherwise by burst workers (:func:`run_jobs`). Raises ``TimeoutError`` if jobs are
    still active after ``timeout`` seconds; at once when only workflow steps are left, waiting
    for jobs that need review or run in other queues; and at once, in-thread inside a transaction, when
    the jobs left wait for a later time: the database's clock stands still inside a
    transaction, so that time never comes.
    """
    if in_thread and concurrency != 1:
        raise ValueError("in_thread runs one job at a time: leave concurrency at 1")
    deadline = time.monotonic() + timeout
    active = Job.objects.using(jobs_settings.DATABASE).filter(status__in=ACTIVE_STATUSES)
    if queues:
        active = active.filter(queue__in=queues)
    while active.exists():
        if not active.exclude(status=JobStatus.WAITING).exists():
            raise TimeoutError(
                f"{active.count()} job(s) wait for jobs that will not end by themselves: " + _stuck(active)
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"{active.count()} job(s) still active after {timeout}s")
        if in_thread:
            if run_one(queues) is not None:
                continue
        else:
            run_jobs(queues, concurrency)
        wait = _seconds_until_next_due(active)
        if wait > 0 and in_thread and connections[jobs_settings.DATABASE].in_atomic_block:
            raise TimeoutError(
                f"{active.count()} job(s) still active, the next one due in {wait:.3f}s: the database's "
                "clock stands still inside this test's transaction, so it never will be. Check the "
                "retry with run_one(), or run the test in a TransactionTestCase"
            )
        if wait > 0:
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        elif in_thread:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))  # running elsewhere


_WORKER_ID = f"{socket.gethostname()}:testing"


def run_durable(job: Job | int, *, limit: int = 20) -> Job:
    """Run durable ``job`` here, execution after execution (:func:`run_one` of its type), until
    it sleeps, waits or ends; return it as it stands. Raises ``AssertionError`` when it is not
    due (it sleeps or waits: ``wake()`` or ``deliver()`` first), or still due after ``limit``
    executions."""
    job_id = job if isinstance(job, int) else job.pk
    jobs = Job.objects.using(jobs_settings.DATABASE)
    current = jobs.get(id=job_id)
    ran = 0
    while _due_now(job_id):
        if ran >= limit:
            raise AssertionError(f"job {job_id} is still due after {limit} executions")
        if run_one(types=[current.type]) is None:
            break
        ran += 1
    if ran == 0:
        raise AssertionError(
            f"job {job_id} is not due ({current.status}): {where(current) or 'nothing to run'}"
        )
    return jobs.get(id=job_id)


def _due_now(job_id: int) -> bool:
    now = Func(template="now()", output_field=DateTimeField())
    jobs = Job.objects.using(jobs_settings.DATABASE)
    return jobs.filter(id=job_id, status=JobStatus.PENDING, available_at__lte=now).exists()


def _stuck(active: QuerySet[Job]) -> str:
    """The jobs the waiting ones wait for that are parked (``needs_review``), or a hint."""
    parked = Job.objects.using(jobs_settings.DATABASE).filter(
        workflow_id__in=active.values("workflow_id"), status=JobStatus.NEEDS_REVIEW
    )
    ids = list(parked.values_list("id", flat=True)[:10])
    if ids:
        return f"jobs {', '.join(map(str, ids))} need review; resolve or retry them"
    # A step retried after a job it waits for failed waits for that job's retry.
    stopped = active.filter(status=JobStatus.WAITING, step__waits_on__remaining=0)
    unsuccessful = Job.objects.using(jobs_settings.DATABASE).filter(
        workflow_id__in=stopped.values("workflow_id"), status__in=(JobStatus.FAILED, JobStatus.CANCELLED)
    )
    ids = list(unsuccessful.order_by("id").values_list("id", flat=True)[:10])
    if ids:
        return f"jobs {', '.join(map(str, ids))} failed or were cancelled; retry them"
    return "the jobs they wait for are in queues not run here"


def _seconds_until_next_due(active: QuerySet[Job]) -> float:
    # Database time: the backoff was counted from the database's now(), not ours. And the
    # claim's now(), the start of the transaction: Django's Now() is the statement's time, which
    # runs on inside a transaction while the claim's clock stands still.
    now = Func(template="now()", output_field=DateTimeField())
    wait = active.filter(status=JobStatus.PENDING).aggregate(wait=Min(F("available_at") - now))["wait"]
    return wait.total_seconds() if wait is not None else 0.0


def _announce_start(alias: str, taken: Claim) -> None:
    if signals.listened(signals.job_started):
        signals.after_commit(alias, lambda: send_job_started(taken, _WORKER_ID))


@contextmanager
def _handler_savepoint(alias: str) -> Iterator[None]:
    """Inside a transaction, run the handler in a savepoint, released unless the transaction
    failed (a database error in the handler), then rolled back: the outcome can be written.

    A worker's handler runs in autocommit, where a failed statement spoils nothing else; inside
    a test's transaction, it would make every later statement fail.
    """
    connection = connections[alias]
    if not connection.in_atomic_block:
        yield
        return
    # The connection's own methods: transaction.savepoint() is renamed in Django 6.1.
    savepoint = connection.savepoint()
    assert savepoint is not None, "PostgreSQL makes savepoints inside a transaction"
    try:
        yield
    finally:
        status = connection.connection.info.transaction_status if connection.connection else None
        if status == TransactionStatus.INERROR or connection.needs_rollback:
            connection.needs_rollback = False  # the rollback to the savepoint repairs it
            connection.savepoint_rollback(savepoint)
        else:
            connection.savepoint_commit(savepoint)


__all__ = [
    "CapturedStatements",
    "Claimed",
    "EnqueuedJob",
    "EnqueuedJobs",
    "QueueRow",
    "Renewal",
    "Statement",
    "assert_enqueued",
    "assert_steps",
    "capture_statements",
    "claim",
    "complete",
    "context",
    "deliver",
    "enqueued_jobs",
    "fail",
    "give_back",
    "queue_rows",
    "recorded_steps",
    "renew",
    "report_progress",
    "retry",
    "run_durable",
    "run_jobs",
    "run_one",
    "run_until_settled",
    "save_checkpoint",
    "wake",
    "where",
]
