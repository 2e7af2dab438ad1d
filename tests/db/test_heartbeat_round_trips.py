"""What one heartbeat turn asks of the database, counted as the protocol counts it: every request
the server answers ends in a ReadyForQuery message, BEGIN and COMMIT included, so the count is the
number of waits for the network a turn makes. A turn that extends a lease and reports the worker
(the live-worker row, and the look for a restored database) waits three times: over a link of
200 ms, 0.6 s of a lease, not 1.8 s."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from psycopg import pq

from django_jobs import enqueue, stepping
from django_jobs.models import DatabaseIdentity, Job, LiveWorker
from django_jobs.runtime.heartbeat import Heartbeat
from django_jobs.runtime.worker import Worker
from django_jobs.transitions import restore

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def round_trips() -> Iterator[list[int]]:
    """The requests this thread's connection sends while the block runs (its libpq trace)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    counted: list[int] = []
    with tempfile.TemporaryFile() as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield counted
        finally:
            pgconn.untrace()
            trace.seek(0)
            lines = trace.read().decode(errors="replace").splitlines()
    answered = [line for line in lines if line.startswith("B\t") and "\tReadyForQuery" in line]
    counted.append(len(answered))


def _running_lease() -> tuple[stepping.Claimed, Job]:
    enqueue("test.noop", {})
    claimed = stepping.claim(types=["test.noop"])
    assert claimed is not None
    lease = claimed._lease
    lease.start()
    lease.last_beat = time.monotonic() - 3600  # due: the last sign of life was long ago
    return claimed, Job.objects.get(id=claimed.job_id)


def test_a_turn_that_beats_and_reports_asks_the_database_three_times() -> None:
    worker = Worker(concurrency=1)
    claimed, before = _running_lease()
    heartbeat = Heartbeat(lambda: [claimed._lease], report=worker._report)
    worker._report()  # the first look of this worker: it has nothing to compare with yet
    generation = DatabaseIdentity.objects.get().generation
    heartbeat._last_report = 0.0  # the report is due as well

    with round_trips() as counted:
        heartbeat._turn()

    assert counted == [3]
    after = Job.objects.get(id=claimed.job_id)
    assert after.lease_expires_at > before.lease_expires_at  # the lease was extended
    assert LiveWorker.objects.filter(worker_id=worker.worker_id).exists()
    assert DatabaseIdentity.objects.get().generation == generation + 1  # the look was made
    assert not worker._restore_watch.held


def test_a_look_that_finds_a_sign_still_judges_it_and_opens_a_hold() -> None:
    """The one-statement look covers only a database found as recorded: a changed record is the
    whole look's, which opens a hold."""
    first = restore.look(None, "w1")
    assert first is not None and first.sign is None
    DatabaseIdentity.objects.update(database_oid=1)  # as a dump restored elsewhere leaves it
    with round_trips() as counted:
        found = restore.look(first.seen, "w1")
    assert found is not None and found.sign is not None and found.held and found.opened is not None
    assert counted[0] > 3  # the transaction of the whole look, with its lock and its writes


def test_a_look_behind_what_the_worker_saw_is_judged_as_went_back() -> None:
    first = restore.look(None, "w1")
    assert first is not None
    later = restore.look(first.seen, "w1")
    assert later is not None and later.sign is None
    DatabaseIdentity.objects.update(generation=first.seen.generation)  # a restore to before `later`
    found = restore.look(later.seen, "w1")
    assert found is not None and found.sign is not None and found.sign.kind == "went_back"
