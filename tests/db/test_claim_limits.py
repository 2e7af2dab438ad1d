"""Concurrency keys and rate limits: the claim holds jobs back, and they use no attempt waiting."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from django_jobs import InvalidOption, enqueue, enqueue_many, job
from django_jobs.limits import RateLimit, parse_rate_limit
from django_jobs.maintenance import reaper
from django_jobs.models import ConcurrencyKey, Job, RateWindow
from django_jobs.registry import registry
from django_jobs.transitions import Claim, ClaimStatement, Outcome, claim, open_rate_windows, write_outcomes
from django_jobs.transitions.execution import MANY_KINDS
from django_jobs.transitions.positions import DEAD_WALK_LIMIT
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = {"test.keyed": 1, "test.keyed_once": 1, "test.noop": 1, "test.rated": 1}


def statement(rates: dict[str, RateLimit] | None = None) -> ClaimStatement:
    statement = ClaimStatement("w", None, TYPES, rate_limits=rates)
    open_rate_windows(statement.rate_limited)
    return statement


def complete(claims: list[Claim]) -> None:
    write_outcomes([Outcome(c.id, c.execution_id, "completed") for c in claims])


def running(key: str) -> int:
    return Job.objects.filter(concurrency_key=key, status="running").count()


def keys_of(claims: list[Claim]) -> list[str | None]:
    by_id = dict(Job.objects.filter(id__in=[c.id for c in claims]).values_list("id", "concurrency_key"))
    return sorted((by_id[c.id] or "-") for c in claims)


# ---- concurrency keys -----------------------------------------------------------------------


def test_jobs_of_one_key_start_one_at_a_time_and_waiting_uses_no_attempt() -> None:
    jobs = enqueue_many("test.keyed_once", [{}] * 3, concurrency_key="customer:42")
    first = claim(statement(), 10)
    assert [c.id for c in first] == [jobs[0].id]
    assert claim(statement(), 10) == []  # the key is at its limit
    assert running("customer:42") == 1
    assert list(Job.objects.filter(id__in=[j.id for j in jobs[1:]]).values_list("status", "attempts")) == [
        ("pending", 0),
        ("pending", 0),
    ]
    complete(first)
    assert running("customer:42") == 0
    assert [c.id for c in claim(statement(), 10)] == [jobs[1].id]


def test_a_type_limit_lets_that_many_of_a_key_run_together() -> None:
    enqueue_many("test.keyed", [{"key": "a"}] * 5 + [{"key": "b"}] * 5)
    claims = claim(statement(), 100)
    assert keys_of(claims) == ["a", "a", "b", "b"]
    assert claim(statement(), 100) == []
    assert running("a") == running("b") == 2


def test_a_busy_key_does_not_hold_back_other_keys_or_jobs_without_a_key() -> None:
    enqueue_many("test.keyed_once", [{}] * 50, concurrency_key="busy")
    enqueue_many("test.keyed_once", [{}] * 2, concurrency_key="quiet")
    enqueue_many("test.noop", [{}] * 3)
    taken = claim(statement(), 10)  # ten candidates, all of the busy key: one of them starts
    assert keys_of(taken) == ["busy"]
    taken += claim(statement(), 10)  # the busy key is left out of the scan now
    assert keys_of(taken) == ["-", "-", "-", "busy", "quiet"]


def test_the_key_comes_from_the_type_function_unless_enqueue_gives_one() -> None:
    by_function = enqueue("test.keyed", {"key": "from-payload"})
    given = enqueue("test.keyed", {"key": "from-payload"}, concurrency_key="given")
    without = enqueue("test.keyed", {})  # the function returns None: no key
    assert (by_function.concurrency_key, by_function.concurrency_limit) == ("from-payload", 2)
    assert (given.concurrency_key, given.concurrency_limit) == ("given", 2)
    assert (without.concurrency_key, without.concurrency_limit) == (None, None)
    stored = Job.objects.get(id=by_function.id)
    assert (stored.concurrency_key, stored.concurrency_limit) == ("from-payload", 2)


@pytest.mark.parametrize("key", ["", "x" * 201, 42, "nul\x00"])
def test_an_invalid_concurrency_key_is_refused_before_anything_is_written(key: Any) -> None:
    with pytest.raises(InvalidOption, match="concurrency_key"):
        enqueue("test.noop", {}, concurrency_key=key)
    with pytest.raises(InvalidOption, match="payload #1: concurrency_key"):
        enqueue_many("test.noop", [{"i": 0}, {"i": 1}], concurrency_key=lambda p: [None, key][p["i"]])
    assert not Job.objects.exists()


def test_running_jobs_count_however_they_got_there_and_a_key_freed_wakes_its_queue() -> None:
    JobFactory.create_batch(2, running=True, type="test.keyed", concurrency_key="k", concurrency_limit=2)
    enqueue("test.keyed", {"key": "k"}, queue="mail")
    assert claim(statement(), 10) == []  # two are running (written directly): the key is full
    with connection.cursor() as cursor:
        cursor.execute("LISTEN django_jobs")
    first = Job.objects.filter(status="running").first()
    assert first is not None
    write_outcomes([Outcome(first.id, first.execution_id, "completed")])  # type: ignore[arg-type]
    heard = [n.payload for n in connection.connection.notifies(timeout=0.5, stop_after=1)]
    assert heard == ["default"]  # the queue of the job that ended: its key has room now
    assert len(claim(statement(), 10)) == 1


def test_the_database_refuses_a_second_running_job_of_a_key_with_a_limit_of_one() -> None:
    JobFactory(running=True, type="test.keyed_once", concurrency_key="k", concurrency_limit=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        JobFactory(running=True, type="test.keyed_once", concurrency_key="k", concurrency_limit=1)
    JobFactory(running=True, type="test.keyed_once", concurrency_key="other", concurrency_limit=1)


def test_the_reaper_forgets_the_rows_of_keys_with_nothing_running() -> None:
    enqueue_many("test.keyed_once", [{}] * 2, concurrency_key="k")
    first = claim(statement(), 10)
    enqueue("test.keyed_once", {}, concurrency_key="idle")
    complete(claim(statement(), 10))  # the idle key's job ran and ended
    reaper.run_once()
    assert list(ConcurrencyKey.objects.values_list("key", flat=True)) == ["k"]  # one is running
    complete(first)
    reaper.run_once()
    assert not ConcurrencyKey.objects.exists()
    assert len(claim(statement(), 10)) == 1  # the claim creates the row again
    assert running("k") == 1


@pytest.mark.parametrize("queues", [None, ["default", "mail"]])
@pytest.mark.parametrize("rates", [None, {"test.rated": RateLimit(20, 1.0)}])
@pytest.mark.parametrize("kinds", ["few", "many"])
def test_the_claim_statement_stays_within_psycopgs_statement_cache(
    queues: list[str] | None, rates: dict[str, RateLimit] | None, kinds: str
) -> None:
    types = TYPES if kinds == "few" else {**TYPES, **{f"other.t{i:03d}": 1 for i in range(MANY_KINDS)}}
    statement = ClaimStatement("w", queues, types, rate_limits=rates)
    for queues_paused in (False, True):  # the usual statement, and the one beside paused queues
        statement.queues_paused = queues_paused
        for sql in (statement.sql, statement.sql_without_promotion):
            assert len(sql.encode()) <= 4096  # psycopg parses longer ones again at every call
    # And the claim from where the last claims stopped, while they step over many dead entries.
    statement.queues_paused = False
    statement.positions.claimed([], walked=DEAD_WALK_LIMIT + 1, swept=True, seconds=0.0)
    from_places = statement.sql_from_places()
    assert from_places is not None and len(from_places.encode()) <= 4096


# ---- rate limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("20/s", (20, 1)), ("100/m", (100, 60)), ("1000/h", (1000, 3600)), ("5/d", (5, 86400)),
     ("30/5m", (30, 300)), (" 7 / s ", (7, 1))],
)  # fmt: skip
def test_rate_limits_are_read_from_count_slash_window(text: str, expected: tuple[int, int]) -> None:
    limit = parse_rate_limit(text)
    assert (limit.count, limit.seconds) == expected


@pytest.mark.parametrize("text", ["", "20", "20/x", "0/s", "-1/s", "1.5/s", "20/0s", "10001/s", "2 per s", 2])
def test_an_invalid_rate_limit_is_refused_at_import(text: Any) -> None:
    with pytest.raises(ValueError, match="rate_limit"):
        job("test.bad_rate", rate_limit=text)
    assert "test.bad_rate" not in registry


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, 10_001])
def test_an_invalid_concurrency_limit_is_refused_at_import(limit: Any) -> None:
    with pytest.raises(ValueError, match="concurrency_limit"):
        job("test.bad_limit", concurrency_limit=limit)
    with pytest.raises(ValueError, match="concurrency_key"):
        job("test.bad_limit", concurrency_key="not a function")  # type: ignore[arg-type]


def test_a_rate_limited_type_starts_no_more_than_its_limit_per_window() -> None:
    five_per_second = statement({"test.rated": RateLimit(5, 1.0)})
    enqueue_many("test.rated", [{}] * 12)
    enqueue_many("test.noop", [{}] * 2)
    first = claim(five_per_second, 100)
    assert sorted(c.type for c in first) == ["test.noop"] * 2 + ["test.rated"] * 5
    assert all(c.counted for c in first if c.type == "test.rated")  # never prefetched
    assert claim(five_per_second, 100) == []
    waiting = Job.objects.filter(type="test.rated", status="pending")
    assert waiting.count() == 7 and {j.attempts for j in waiting} == {0}
    window = RateWindow.objects.get(type="test.rated")
    assert len(window.starts) == 5
    deadline = time.monotonic() + 5
    while not (second := claim(five_per_second, 100)):
        assert time.monotonic() < deadline, "the window never opened"
        time.sleep(0.02)
    assert len(second) == 5
    rated = Job.objects.exclude(started_at=None).filter(type="test.rated")
    started = sorted(rated.values_list("started_at", flat=True))
    assert (started[5] - started[0]).total_seconds() >= 1.0


def test_a_rate_limited_job_is_not_prefetched() -> None:
    rated = statement({"test.rated": RateLimit(5, 1.0)})
    enqueue_many("test.rated", [{}] * 3)
    assert claim(rated, 10, start_now=0) == []  # only idle slots take it
    assert RateWindow.objects.get(type="test.rated").starts == []  # and no start was spent
    assert len(claim(rated, 10, start_now=2)) == 2


def test_a_claim_that_fills_a_window_says_when_it_opens() -> None:
    rated = statement({"test.rated": RateLimit(2, 0.5)})
    enqueue_many("test.rated", [{}] * 3, queue="slow")
    with connection.cursor() as cursor:
        cursor.execute("LISTEN django_jobs")
    assert len(claim(rated, 10)) == 2
    heard = [n.payload for n in connection.connection.notifies(timeout=0.5, stop_after=1)]
    queue, seconds = heard[0].split(" ")
    assert queue == "slow" and 0.3 < float(seconds) <= 0.5


def test_a_missing_rate_window_holds_jobs_back_until_the_reaper_opens_it() -> None:
    rated = statement({"test.rated": RateLimit(5, 1.0)})
    RateWindow.objects.all().delete()
    enqueue("test.rated", {})
    assert claim(rated, 10) == []
    reaper.run_once()  # the registry's test.rated is rate limited: its window is created
    assert len(claim(rated, 10)) == 1
