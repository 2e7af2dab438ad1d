"""Helpers for your own tests: run queued jobs now, and see what a block of code enqueued.

- :func:`run_one` claims one job and runs it on the calling thread, on the jobs database's
  connection, through the worker's own claim, executor and outcome writer: it works inside a
  ``TestCase`` (everything happens in the test's transaction) as well as outside one.
- :func:`run_jobs` runs a real burst worker, on threads with their own connections: it needs
  committed jobs (``TransactionTestCase``); :func:`run_until_settled` runs either way.
- :func:`enqueued_jobs` records what a block enqueues, and keeps it out of the queue;
  :func:`assert_enqueued` checks what it recorded, with a message that lists what was
  enqueued instead.
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction
from django.db.models import DateTimeField, F, Func, Min, QuerySet
from psycopg.pq import TransactionStatus

from django_jobs import enqueueing, outcomes, signals, transitions
from django_jobs.conf import jobs_settings
from django_jobs.context import Lease
from django_jobs.executor import run
from django_jobs.models import Job
from django_jobs.registry import registry
from django_jobs.states import ACTIVE_STATUSES, JobStatus
from django_jobs.transitions import Claim, ClaimStatement
from django_jobs.transitions.claimable import claim_inputs
from django_jobs.worker import Worker, WorkerStats

# ---- running jobs ---------------------------------------------------------------------------


def run_one(queues: Sequence[str] | None = None, types: Sequence[str] | None = None) -> Job | None:
    """Claim at most one claimable job and run it here; return the job as it ended, or None.

    The job is the one a worker would claim next (``Job.objects.claimable(queues, types)``
    lists them in that order). It is claimed by the worker's claim statement, run by the
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
    inputs = claim_inputs(types)
    if not inputs.versions:
        return None
    statement = ClaimStatement(
        _WORKER_ID, list(queues or []), inputs.versions, inputs.leases, inputs.oldest, inputs.rate_limits
    )
    transitions.open_rate_windows(statement.rate_limited)
    claims = transitions.claim(statement, 1)
    if not claims:
        return None
    claim = claims[0]
    job_type = registry.get(claim.type)
    assert job_type is not None, "the claim takes only types this process knows"
    lease = Lease(
        claim.id,
        claim.execution_id,
        job_type.lease,
        beats=job_type.heartbeat,
        timeout=job_type.timeout,
        counted=claim.counted,
        claimed_db=claim.claimed_at,
    )
    _announce_start(alias, claim)
    with _handler_savepoint(alias):
        finished = run(claim, lease, reraise_base=True)
    written = outcomes.record([finished])
    outcomes.announce([finished], written, _WORKER_ID)
    return Job.objects.using(alias).get(id=claim.id)


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
    """Run jobs until no job is pending or running, waiting out retry backoffs.

    With ``in_thread``, one job at a time by :func:`run_one`, on this thread (a ``TestCase``
    works); otherwise by burst workers (:func:`run_jobs`). Raises ``TimeoutError`` if jobs are
    still active after ``timeout`` seconds, and at once, in-thread inside a transaction, when
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


def _seconds_until_next_due(active: QuerySet[Job]) -> float:
    # Database time: the backoff was counted from the database's now(), not ours. And the
    # claim's now(), the start of the transaction: Django's Now() is the statement's time, which
    # runs on inside a transaction while the claim's clock stands still.
    now = Func(template="now()", output_field=DateTimeField())
    wait = active.filter(status=JobStatus.PENDING).aggregate(wait=Min(F("available_at") - now))["wait"]
    return wait.total_seconds() if wait is not None else 0.0


def _announce_start(alias: str, claim: Claim) -> None:
    if signals.listened(signals.job_started):
        signals.after_commit(
            alias,
            lambda: signals.send(
                signals.job_started, Job, job_id=claim.id, type=claim.type, queue=claim.queue,
                attempt=claim.attempt, execution_id=claim.execution_id, worker_id=_WORKER_ID,
            ),
        )  # fmt: skip


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
    savepoint = transaction.savepoint(using=alias)
    try:
        yield
    finally:
        status = connection.connection.info.transaction_status if connection.connection else None
        if status == TransactionStatus.INERROR or connection.needs_rollback:
            connection.needs_rollback = False  # the rollback to the savepoint repairs it
            transaction.savepoint_rollback(savepoint, using=alias)
        else:
            transaction.savepoint_commit(savepoint, using=alias)


# ---- what a block enqueued ------------------------------------------------------------------


@dataclass(frozen=True)
class EnqueuedJob:
    """One job a block enqueued, as it asked for it."""

    type: str
    payload: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    #: When it was asked to run: ``run_at``, or None (at once, or after ``delay``).
    run_at: dt.datetime | None
    #: Seconds it was asked to wait (``delay``), 0 for none.
    delay: float
    unique_key: str | None
    concurrency_key: str | None
    #: The row, when the block wrote it (``enqueued_jobs(insert=True)``); unsaved otherwise.
    job: Job

    def describe(self) -> str:
        options = [f"queue={self.queue!r}"]
        for name in ("priority", "delay", "run_at", "unique_key", "concurrency_key"):
            value = getattr(self, name)
            if value:
                options.append(f"{name}={value!r}")
        return f"{self.type} {self.payload!r} ({', '.join(options)})"


@dataclass(eq=False)
class _Entry:
    enqueued: EnqueuedJob
    alias: str
    committed: bool = False

    def commit(self) -> None:
        self.committed = True

    def live(self) -> bool:
        """Whether the enqueue stands: committed, or in a transaction still open. A rolled back
        transaction drops its ``on_commit`` callbacks, this entry's among them."""
        if self.committed:
            return True
        pending = getattr(connections[self.alias], "run_on_commit", None)
        if pending is None:
            return True
        return any(callback[1] == self.commit for callback in pending)


@dataclass(eq=False)
class EnqueuedJobs:
    """What a block enqueued: iterate it, ``len()`` it, filter it with :meth:`of`, check it
    with :meth:`assert_enqueued`. An enqueue whose transaction rolled back is not in it."""

    insert: bool = False
    _entries: list[_Entry] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def jobs(self) -> list[EnqueuedJob]:
        with self._lock:
            return [entry.enqueued for entry in self._entries if entry.live()]

    def __iter__(self) -> Iterator[EnqueuedJob]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def __getitem__(self, index: int) -> EnqueuedJob:
        return self.jobs[index]

    def of(self, type_or_handler: Any) -> list[EnqueuedJob]:
        """The jobs of one type (a type name, a ``@job`` handler or a ``@task``)."""
        name = _type_name(type_or_handler)
        return [job for job in self.jobs if job.type == name]

    def assert_enqueued(
        self, type_or_handler: Any, payload: dict[str, Any] | None = None, *, count: int | None = None,
        **options: Any,
    ) -> list[EnqueuedJob]:  # fmt: skip
        """Assert that the block enqueued a job of this type (with this ``payload``, and these
        options: ``queue=``, ``priority=``, ``unique_key=``…) — exactly ``count`` of them, if
        given, else at least one. Returns the matching jobs. ``unittest.mock.ANY`` matches any
        value, in the payload too.

        Raises ``AssertionError`` listing what was enqueued instead.
        """
        name = _type_name(type_or_handler)
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise TypeError(f"assert_enqueued() got unknown option(s) {', '.join(unknown)}; known: "
                            f"{', '.join(sorted(_OPTIONS))}")  # fmt: skip
        jobs = self.jobs
        matching = [
            job for job in jobs
            if job.type == name
            and (payload is None or job.payload == payload)
            and all(getattr(job, key) == value for key, value in options.items())
        ]  # fmt: skip
        if (len(matching) == count) if count is not None else matching:
            return matching
        wanted = f"{'a job' if count is None else f'{count} job(s)'} of type {name!r}"
        if payload is not None:
            wanted += f" with payload {payload!r}"
        if options:
            wanted += " and " + ", ".join(f"{key}={value!r}" for key, value in sorted(options.items()))
        lines = [f"expected {wanted}; {len(matching)} enqueued."]
        if jobs:
            lines.append(f"Enqueued in this block ({len(jobs)}):")
            lines += [f"  - {job.describe()}" for job in jobs]
        else:
            lines.append("Nothing was enqueued in this block.")
        raise AssertionError("\n".join(lines))

    def _add(self, unsaved: list[Job], delay: float, jobs: list[Job]) -> None:
        """Record one call's jobs: as asked (``unsaved``), and as returned (``jobs``)."""
        alias = jobs_settings.DATABASE
        entries = [
            _Entry(
                EnqueuedJob(
                    type=asked.type,
                    payload=asked.payload,
                    queue=asked.queue,
                    priority=asked.priority,
                    max_attempts=asked.max_attempts,
                    # run_at as asked; an unsaved job without one holds the column's default.
                    run_at=asked.available_at if isinstance(asked.available_at, dt.datetime) else None,
                    delay=delay,
                    unique_key=asked.unique_key,
                    concurrency_key=asked.concurrency_key,
                    job=job,
                ),
                alias,
            )
            for asked, job in zip(unsaved, jobs, strict=True)
        ]
        with self._lock:
            self._entries += entries
        in_transaction = connections[alias].in_atomic_block
        for entry in entries:
            # Marks the entry committed when its transaction commits; a rollback drops the
            # callback, and with it the entry (see _Entry.live). Without a transaction, it is
            # committed already (and on_commit would open a connection to say so).
            if in_transaction:
                transaction.on_commit(entry.commit, using=alias)
            else:
                entry.commit()


_OPTIONS = frozenset(
    {"queue", "priority", "max_attempts", "run_at", "delay", "unique_key", "concurrency_key"}
)

#: The blocks recording now, innermost last: each one records every enqueue.
_recording: list[EnqueuedJobs] = []
_recording_lock = threading.Lock()


@contextmanager
def enqueued_jobs(*, insert: bool = False) -> Iterator[EnqueuedJobs]:
    """Record what the block enqueues — type, payload and options — without writing it::

        with enqueued_jobs() as captured:
            response = client.post("/checkout/", {"amount_cents": 2500})
        captured.assert_enqueued("shop.charge_order", payload={"order_id": order.id})

    Every call of ``enqueue()`` / ``enqueue_many()`` (and of a task's ``enqueue()`` on
    ``JobsBackend``) is validated as usual, then recorded instead of being written: the queue
    is left as it was, and ``enqueue()`` returns the job unsaved (its ``id`` is None). With
    ``insert=True`` the jobs are also written, as without the block (run them with
    :func:`run_one`). Either way, an enqueue whose transaction rolls back is dropped from the
    record, as its job would be; ``unique_key`` deduplication is the database's, so only
    ``insert=True`` applies it. Recording blocks nest; each sees what its block enqueued, from
    any thread.
    """
    captured = EnqueuedJobs(insert=insert)
    with _recording_lock:
        _recording.append(captured)
        enqueueing.capture = _record
    try:
        yield captured
    finally:
        with _recording_lock:
            _recording.remove(captured)
            enqueueing.capture = _record if _recording else None


def assert_enqueued(
    type_or_handler: Any,
    payload: dict[str, Any] | None = None,
    *,
    count: int | None = None,
    captured: EnqueuedJobs | None = None,
    **options: Any,
) -> list[EnqueuedJob]:
    """:meth:`EnqueuedJobs.assert_enqueued` on ``captured``, by default the innermost
    ``enqueued_jobs()`` block still open."""
    if captured is None:
        with _recording_lock:
            if not _recording:
                raise RuntimeError(
                    "assert_enqueued() needs an open `with enqueued_jobs():` block, or captured=..."
                )
            captured = _recording[-1]
    return captured.assert_enqueued(type_or_handler, payload, count=count, **options)


def _record(jobs: list[Job], delay: float, insert: Callable[[], list[Job]]) -> list[Job]:
    with _recording_lock:
        blocks = list(_recording)
    if not blocks:  # the last block closed while this call was on its way
        return insert()
    # The innermost block decides whether the jobs are written; every open block records them.
    written = insert() if blocks[-1].insert else jobs
    for block in blocks:
        block._add(jobs, delay, written)
    return written


def _type_name(type_or_handler: Any) -> str:
    if isinstance(type_or_handler, str):
        return type_or_handler
    name = getattr(type_or_handler, "job_name", None) or getattr(type_or_handler, "module_path", None)
    if not isinstance(name, str):
        raise TypeError(f"{type_or_handler!r} is not a job type name, a @job handler nor a task")
    return name


__all__ = [
    "EnqueuedJob",
    "EnqueuedJobs",
    "assert_enqueued",
    "enqueued_jobs",
    "run_jobs",
    "run_one",
    "run_until_settled",
]
