"""What a block enqueued: the recording behind ``django_jobs.testing.enqueued_jobs()``.

While a block records, ``enqueue()`` hands each call that passed validation to
:func:`_record` (through ``enqueueing.capture``) instead of writing it, or as well as writing it
(``insert=True``). Which entries stand is the transaction's business: each one is confirmed by
an ``on_commit`` callback, which a rollback drops with the entry.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction

from django_jobs import enqueueing
from django_jobs.conf import jobs_settings
from django_jobs.models import Job


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
    ``django_jobs.testing.run_one()``). Either way, an enqueue whose transaction rolls back is
    dropped from the record, as its job would be; ``unique_key`` deduplication is the
    database's, so only ``insert=True`` applies it. Recording blocks nest; each sees what its
    block enqueued, from any thread.
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
