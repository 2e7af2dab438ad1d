"""Claims while a snapshot holds the vacuum horizon back: a real second connection holds a
REPEATABLE READ snapshot open, the claims take real rows, and every dead index entry the claim
steps over is counted by PostgreSQL itself (see transitions.positions)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from django_jobs import enqueue, enqueue_many
from django_jobs.models import Job
from django_jobs.runtime.worker import Worker
from django_jobs.states import JobStatus
from django_jobs.transitions.execution import MANY_KINDS, ClaimStatement, claim
from django_jobs.transitions.positions import DEAD_WALK_LIMIT
from tests.db.inprocess import BackgroundWorker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 3_000
BATCH = 100
#: Sweeps only when asked for: the tests decide when each claim reads every kind from its head.
NO_TIMED_SWEEPS = {"POLL_INTERVAL": 3600.0}


def _where() -> dict[str, object]:
    db = connection.settings_dict
    return {"host": db["HOST"], "port": db["PORT"] or 5432, "user": db["USER"], "dbname": db["NAME"]}


@pytest.fixture
def held_horizon() -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """Another client's REPEATABLE READ transaction, idle after reading a table that is not a
    job table: no dead row version of the job table can be removed while it is open."""
    where = _where()
    with psycopg.connect(**where, autocommit=True) as conn:
        # Entries left by the rolled-back rows of earlier tests would be counted as stepped over.
        conn.execute("VACUUM django_jobs_job")
    holder = psycopg.connect(**where, application_name="report")
    holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    holder.execute("SELECT count(*) FROM django_content_type")
    yield holder
    holder.close()


def backlog(n: int = BACKLOG) -> None:
    """``n`` pending no-op jobs, and the job table's statistics as a queue that holds them has
    them: on a table the planner believes empty, it reads the whole table instead of the claim
    index, and no index entry is stepped over (or counted)."""
    enqueue_many("test.noop", [{}] * n)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobs_job")


def every_queue() -> ClaimStatement:
    return ClaimStatement("w-test", None, {"test.noop": 1, "test.record": 1})


def named_queues() -> ClaimStatement:
    return ClaimStatement("w-test", ["default", "mail"], {"test.noop": 1, "test.record": 1})


def drain(statement: ClaimStatement) -> tuple[list[int], list[tuple[bool, int]]]:
    """Claim batches until one comes back empty: the ids taken, and (swept, walked) per claim."""
    ids: list[int] = []
    seen: list[tuple[bool, int]] = []
    while claims := claim(statement, BATCH):
        ids += [c.id for c in claims]
        seen.append((statement.positions.last_swept, statement.positions.walked))
    seen.append((statement.positions.last_swept, statement.positions.walked))
    return ids, seen


def test_under_a_held_horizon_claims_start_where_the_last_ones_stopped(held_horizon: object) -> None:
    backlog()
    statement = every_queue()
    with override_settings(DJANGO_JOBS=NO_TIMED_SWEEPS):
        ids, seen = drain(statement)
        assert sorted(ids) == sorted(Job.objects.values_list("id", flat=True)), "each job exactly once"
        # The sweeps stepped over every job claimed before them, until one stepped over more
        # than the limit; from then on the claims start at the place and step over none.
        sweeps = [walked for swept, walked in seen if swept]
        assert sweeps == [BATCH * n for n in range(len(sweeps))]
        assert sweeps[-1] > DEAD_WALK_LIMIT >= sweeps[-2]
        resumed = [walked for swept, walked in seen if not swept]
        assert len(resumed) >= BACKLOG // BATCH - len(sweeps) and max(resumed) == 0
        assert statement.positions.remembering
        # A sweep still steps over every one of them: the horizon is still held.
        statement.positions.want_sweep()
        assert claim(statement, BATCH) == [] and statement.positions.walked == BACKLOG


def test_a_worker_of_many_kinds_walks_its_live_kinds_away_from_the_dead_entries(held_horizon: object) -> None:
    backlog()
    many = {"test.noop": 1, "test.record": 1, **{f"other.t{i:03d}": 1 for i in range(MANY_KINDS)}}
    statement = ClaimStatement("w-test", None, many)
    with override_settings(DJANGO_JOBS=NO_TIMED_SWEEPS):
        ids, seen = drain(statement)
        assert sorted(ids) == sorted(Job.objects.values_list("id", flat=True)), "each job exactly once"
        # The walk of the kinds with ready jobs lands on each kind's last entry, away from the
        # claimed jobs' entries: only the scan steps over them (the kind the walk found may
        # count as one less).
        sweeps = [walked for swept, walked in seen if swept]
        assert all(BATCH * n - 1 <= walked <= BATCH * n for n, walked in enumerate(sweeps[1:], 1))
        assert sweeps[-1] > DEAD_WALK_LIMIT >= sweeps[-2]
        # From then on the claims start at the places: per kind, with no walk.
        resumed = [walked for swept, walked in seen if not swept]
        assert len(resumed) >= BACKLOG // BATCH - len(sweeps) and max(resumed) == 0
        assert statement.positions.remembering


def test_a_worker_of_named_queues_starts_each_queue_where_its_claims_stopped(held_horizon: object) -> None:
    backlog()
    enqueue_many("test.noop", [{}] * BACKLOG, queue="mail")
    statement = named_queues()
    with override_settings(DJANGO_JOBS=NO_TIMED_SWEEPS):
        ids, seen = drain(statement)
        assert sorted(ids) == sorted(Job.objects.values_list("id", flat=True)), "each job exactly once"
        assert statement.positions.remembering
        sweeps = [walked for swept, walked in seen if swept]
        resumed = [walked for swept, walked in seen if not swept]
        assert sweeps[-1] > DEAD_WALK_LIMIT and len(resumed) > len(sweeps) and max(resumed) == 0
        # A job of one queue before that queue's place waits for a sweep; the other queue's
        # place is its own.
        urgent = enqueue("test.noop", {}, queue="mail", priority=10)
        later = enqueue("test.noop", {}, queue="default")
        assert [c.id for c in claim(statement, BATCH)] == [later.id]
        statement.positions.want_sweep()
        assert [c.id for c in claim(statement, BATCH)] == [urgent.id]


def test_a_job_before_the_place_is_taken_by_the_next_sweep(held_horizon: object) -> None:
    backlog()
    statement = every_queue()
    with override_settings(DJANGO_JOBS=NO_TIMED_SWEEPS):
        taken = [c.id for c in claim(statement, BATCH)]
        while not statement.positions.remembering:
            statement.positions.want_sweep()
            taken += [c.id for c in claim(statement, BATCH)]
        # Before the place: a higher priority, and a job made pending again with its old due
        # time (as the reaper or an operator's retry does). After it: the rest of the backlog.
        urgent = enqueue("test.noop", {}, priority=10)
        again = Job.objects.get(id=taken[0])
        Job.objects.filter(id=again.id).update(status=JobStatus.PENDING, execution_id=None)
        rest, seen = drain(statement)
        assert urgent.id not in rest and again.id not in rest
        assert not any(swept for swept, _ in seen), "no sweep was due"
        assert len(set(taken + rest)) == BACKLOG
        statement.positions.want_sweep()
        swept = [c.id for c in claim(statement, BATCH)]
        assert swept[:2] == [urgent.id, again.id], "best priority first, then the longest due"
        assert Job.objects.filter(status=JobStatus.PENDING).count() == 0


class HorizonWatch(threading.Thread):
    """Whatever held the horizon back while it watched (every 5 ms), as the ``held_horizon``
    fixture does: a session of this database holding a snapshot (an autovacuum's ANALYZE holds
    one for as long as it samples, throttled by its cost delay); a writing transaction of any
    database, since every snapshot taken while it runs, this database's claims' own included,
    keeps what it could still see; a prepared transaction or a replication slot.

    It watches from the ``postgres`` database: a snapshot of its own query, taken in this one,
    would hold the horizon back for the length of that query and be the disturbance it looks
    for (the horizon of a table counts only the sessions of its own database)."""

    def __init__(self, own_pid: int) -> None:
        super().__init__(daemon=True)
        self.own_pid = own_pid
        self.halt = threading.Event()
        self.holders: set[tuple[object, ...]] = set()

    def run(self) -> None:
        where = _where()
        watched = where["dbname"]
        with psycopg.connect(**{**where, "dbname": "postgres"}, autocommit=True) as conn:
            while not self.halt.wait(0.005):
                self.holders.update(conn.execute(
                    "SELECT pid, datname, backend_type, left(query, 80) FROM pg_stat_activity"
                    " WHERE pid <> %s AND pid <> pg_backend_pid()"
                    "   AND (datname = %s AND backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)"
                    " UNION ALL SELECT NULL, database, 'prepared transaction', gid FROM pg_prepared_xacts"
                    " UNION ALL SELECT NULL, database, 'replication slot', slot_name::text"
                    "   FROM pg_replication_slots WHERE xmin IS NOT NULL",
                    [self.own_pid, watched],
                ).fetchall())  # fmt: skip


def test_without_a_held_horizon_every_claim_reads_every_kind_from_its_head() -> None:
    """The claims' walk is PostgreSQL's to count: it is only as short as the horizon is free.
    A drain during which another session of the database held a snapshot (an autovacuum's
    ANALYZE, which nothing here can forbid) proves nothing either way, nor does one whose claim
    stepped over more than the previous claim left (a snapshot too brief for a 5 ms watch to
    see): it is drained again, up to three times, and what each drain met is named if none
    ran free. A claim that marks no entry dead fails all three."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own_pid,) = cursor.fetchone()
    disturbed: list[object] = []
    for _ in range(3):
        Job.objects.all().delete()
        backlog()
        statement = every_queue()
        watch = HorizonWatch(own_pid)
        watch.start()
        try:
            with override_settings(DJANGO_JOBS=NO_TIMED_SWEEPS):
                ids, seen = drain(statement)
        finally:
            watch.halt.set()
            watch.join()
        if watch.holders:
            disturbed.append(watch.holders)
            continue
        assert len(set(ids)) == BACKLOG
        # Each claim steps over at most the entries of the previous one: the first scan that
        # meets an entry of a row nobody can see any more marks it dead, and later scans skip it.
        if not all(swept and walked <= BATCH for swept, walked in seen):
            disturbed.append(seen)
            continue
        assert not statement.positions.remembering
        return
    pytest.fail(f"no drain ran free: {disturbed}")


def test_a_worker_under_a_held_horizon_still_runs_a_job_before_its_place(
    held_horizon: psycopg.Connection[tuple[object, ...]],
) -> None:
    backlog()
    with BackgroundWorker(concurrency=2) as worker:
        positions = worker._producer.statement.positions
        wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == BACKLOG, timeout=60)
        assert positions.remembering and positions.resumed > 0
        # Of a higher priority than every job the worker took: before its place. The idle
        # worker's periodic read of its outlook finds it due, and its next claim is a sweep.
        urgent = enqueue("test.noop", {}, priority=10)
        wait_for(lambda: Job.objects.get(id=urgent.id).status == JobStatus.COMPLETED, timeout=10)
        # The snapshot ends: the next sweep marks the dead entries as it steps over them, and
        # the one after steps over few, which ends the mode.
        held_horizon.rollback()
        for _ in range(3):
            time.sleep(0.25)  # past POLL_INTERVAL (0.2 s in the test project): the claim is a sweep
            done = enqueue("test.noop", {})
            wait_for(lambda: Job.objects.get(id=done.id).status == JobStatus.COMPLETED)  # noqa: B023
        assert not positions.remembering
    summary = worker.stats.summary()
    assert summary["claims_from_places"] > 0 and summary["dead_entries_walked_max"] > DEAD_WALK_LIMIT


def test_a_worker_that_drains_and_exits_under_a_held_horizon_leaves_nothing_behind(
    held_horizon: object,
) -> None:
    # Retries wait out a backoff, not ready, and are promoted with their earlier due times: before
    # the places. A worker that exits once a claim finds nothing must not take an empty claim from
    # its places for "nothing left".
    flaky = enqueue_many("test.flaky", [{"succeed_on": 2}] * 20)
    backlog()
    worker = Worker(concurrency=2, until_settled=True)
    worker.run()
    left = Job.objects.exclude(status=JobStatus.COMPLETED).count()
    assert left == 0, f"stopped ({worker.stop_reason}) with {left} jobs left"
    assert {job.attempts for job in Job.objects.filter(id__in=[j.id for j in flaky])} == {2}
    summary = worker.stats.summary()
    assert summary["claims_from_places"] > 0 and summary["claim_sweeps"] > 0
