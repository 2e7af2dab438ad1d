"""Schedules fired by real `runjobs` processes: once per tick with three workers, and across a
fleet killed for several ticks (coalesced, or recorded as missed past the grace)."""

from __future__ import annotations

import datetime as dt
import itertools
import signal
from collections.abc import Iterator

import pytest
from django.db import connection

from django_jobs.models import Job, ScheduleTick
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def db_now() -> dt.datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now: dt.datetime = cursor.fetchone()[0]
    return now


def ticks() -> list[ScheduleTick]:
    return list(ScheduleTick.objects.filter(schedule="test-tick").order_by("tick_at"))


@pytest.fixture
def fleet(worker_env: dict[str, str]) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def start(fleet: list[WorkerProcess], env: dict[str, str], count: int) -> list[WorkerProcess]:
    workers = [WorkerProcess(env, "--concurrency", "2") for _ in range(count)]
    fleet.extend(workers)
    return workers


def assert_contiguous(rows: list[ScheduleTick], every: float) -> None:
    gaps = {(b.tick_at - a.tick_at).total_seconds() for a, b in itertools.pairwise(rows)}
    assert gaps <= {every}, f"ticks not one period apart: {sorted(gaps)}"


def test_three_workers_fire_each_tick_exactly_once(
    fleet: list[WorkerProcess], worker_env: dict[str, str]
) -> None:
    env = {**worker_env, "DJANGO_JOBS_TICK_EVERY": "1"}
    workers = start(fleet, env, 3)
    wait_for(lambda: len(ticks()) >= 5, timeout=30, what="five ticks")
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(timeout=20) == 0, worker.output()
    rows = ticks()
    assert len(rows) >= 5
    assert_contiguous(rows, 1.0)  # none missing (and the unique constraint: none doubled)
    assert {row.outcome for row in rows} == {"enqueued"}
    assert [row.coalesced for row in rows] == [0] * len(rows)
    job_ids = [row.job_id for row in rows]
    assert len(set(job_ids)) == len(rows)
    jobs = Job.objects.filter(type="test.ticked")
    assert sorted(jobs.values_list("id", flat=True)) == sorted(job_ids)  # no job without its tick
    status = dict(jobs.values_list("id", "status"))
    # The workers stop one after the other: the last one may fire a tick a moment before its
    # own SIGTERM, and a stopping worker claims nothing new. Only that last tick's job may be
    # left, and only pending (the next worker runs it); every other one ran.
    unfinished = [row for row in rows if status[row.job_id] != "completed"]
    assert unfinished in ([], rows[-1:]), [(row.tick_at, status[row.job_id]) for row in unfinished]
    assert all(status[row.job_id] == "pending" for row in unfinished)


def test_ticks_missed_while_all_workers_were_down_coalesce_into_one_run(
    fleet: list[WorkerProcess], worker_env: dict[str, str]
) -> None:
    # A worker killed mid-job leaves the last tick's job running until its lease expires, and
    # with on_running="skip" the first tick after the restart would be skipped for it; this test
    # is about coalescing, so ticks enqueue regardless.
    env = {**worker_env, "DJANGO_JOBS_TICK_EVERY": "1", "DJANGO_JOBS_TICK_ON_RUNNING": "enqueue"}
    first = start(fleet, env, 2)
    wait_for(lambda: len(ticks()) >= 2, timeout=30, what="two ticks")
    for worker in first:
        worker.kill()
    before = ticks()
    down_since = db_now()
    wait_for(lambda: (db_now() - down_since).total_seconds() > 4, what="four ticks with no worker")
    start(fleet, env, 2)
    wait_for(lambda: len(ticks()) >= len(before) + 3, timeout=30, what="ticks after the restart")
    rows = ticks()
    resumed = rows[len(before)]
    assert rows[: len(before)] == before
    # The ticks of the outage ran once, as their latest; then one run per tick again.
    skipped = round((resumed.tick_at - before[-1].tick_at).total_seconds()) - 1
    assert skipped >= 3
    assert (resumed.outcome, resumed.coalesced) == ("enqueued", skipped)
    assert_contiguous(rows[len(before) :], 1.0)
    assert Job.objects.filter(type="test.ticked").count() == len(rows)


def test_a_tick_found_later_than_the_grace_after_an_outage_is_recorded_as_missed(
    fleet: list[WorkerProcess], worker_env: dict[str, str]
) -> None:
    # Ticks every 4 s; the fleet comes back about 0.5-2.5 s after a tick it missed, later
    # than its 0.3 s grace and before the next tick.
    # Ticks enqueue even if the kill left the first tick's job running (see above).
    env = {
        **worker_env,
        "DJANGO_JOBS_TICK_EVERY": "4",
        "DJANGO_JOBS_TICK_GRACE": "0.3",
        "DJANGO_JOBS_TICK_ON_RUNNING": "enqueue",
    }
    first = start(fleet, env, 2)
    wait_for(lambda: len(ticks()) >= 1, timeout=30, what="a tick")
    for worker in first:
        worker.kill()
    last = ticks()[-1].tick_at
    wait_for(lambda: (db_now() - last).total_seconds() > 8.5, timeout=30, what="two missed ticks")
    start(fleet, env, 2)
    wait_for(lambda: len(ticks()) >= 3, timeout=30, what="the next ticks")
    rows = ticks()
    missed = rows[1]
    assert (missed.tick_at - last).total_seconds() == 8.0
    assert (missed.outcome, missed.coalesced, missed.job_id) == ("missed", 1, None)
    assert rows[2].outcome == "enqueued"
    assert (rows[2].tick_at - missed.tick_at).total_seconds() == 4.0
    assert Job.objects.filter(type="test.ticked").count() == len([r for r in rows if r.job_id])
