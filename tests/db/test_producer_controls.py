"""The producer's controls: unique for a period, debounce, and a start-by deadline — what each
writes, what each refuses before writing, and how a job past its deadline ends (the worker's
start, the reaper's pass, explainjob)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.db.models.functions import Now

from django_jobs import InvalidOption, enqueue, enqueue_many
from django_jobs.errors import ErrorCode
from django_jobs.maintenance import reaper
from django_jobs.models import Job, JobEvent
from django_jobs.observe.diagnosis import Reason, explain
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import run_one
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def ended_ago(job: Job, seconds: float) -> None:
    """Inside a test's transaction the database's clock stands still: move the job's times back."""
    past = Now() - dt.timedelta(seconds=seconds)
    Job.objects.filter(id=job.id).update(
        status=JobStatus.COMPLETED, created_at=past, finished_at=past, completed_at=past
    )


# ---- unique for a period ----------------------------------------------------------------------


def test_unique_for_returns_the_job_that_ended_within_the_window() -> None:
    first = enqueue("test.noop", {"n": 1}, unique_key="sync:42", unique_for=600)
    ended_ago(first, 60)
    again = enqueue("test.noop", {"n": 2}, unique_key="sync:42", unique_for=600)
    assert again.id == first.id and again.status == JobStatus.COMPLETED
    assert Job.objects.filter(type="test.noop").count() == 1


def test_unique_for_makes_a_new_job_once_the_window_has_passed() -> None:
    first = enqueue("test.noop", {"n": 1}, unique_key="sync:42", unique_for=600)
    ended_ago(first, 601)
    again = enqueue("test.noop", {"n": 2}, unique_key="sync:42", unique_for=600)
    assert again.id != first.id and again.status == JobStatus.PENDING


def test_unique_for_counts_the_creation_too() -> None:
    """A job created within the window holds it, whenever it ended (here: a minute after)."""
    first = enqueue("test.noop", {}, unique_key="k", unique_for=600)
    Job.objects.filter(id=first.id).update(
        status=JobStatus.FAILED, created_at=Now() - dt.timedelta(seconds=599), finished_at=Now()
    )
    assert enqueue("test.noop", {}, unique_key="k", unique_for=10).id == first.id


def test_unique_for_is_per_type_and_key_and_plain_keys_are_unchanged() -> None:
    first = enqueue("test.noop", {}, unique_key="k", unique_for=600)
    ended_ago(first, 1)
    assert enqueue("test.noop", {}, unique_key="other", unique_for=600).id != first.id
    assert enqueue("test.flaky", {"succeed_on": 1}, unique_key="k", unique_for=600).id != first.id
    assert enqueue("test.noop", {}, unique_key="k").id != first.id  # no window: live holders only


def test_enqueue_many_with_unique_for_answers_each_key_once() -> None:
    taken = enqueue("test.noop", {"n": 0}, unique_key="a", unique_for=60)
    ended_ago(taken, 30)
    jobs = enqueue_many(
        "test.noop", [{"n": 1}, {"n": 2}, {"n": 3}],
        unique_key=lambda p: "a" if p["n"] == 1 else f"b{p['n']}", unique_for=60,
    )  # fmt: skip
    assert jobs[0].id == taken.id
    assert len({jobs[1].id, jobs[2].id, taken.id}) == 3


# ---- debounce -----------------------------------------------------------------------------------


def test_debounce_updates_the_pending_job_and_pushes_its_start(db_now: Callable[[], Any]) -> None:
    first = enqueue("test.noop", {"edit": 1}, debounce=5, debounce_key="doc:7")
    first.refresh_from_db()
    assert dt.timedelta(seconds=4) < first.available_at - db_now() <= dt.timedelta(seconds=5)
    Job.objects.filter(id=first.id).update(available_at=Now() + dt.timedelta(seconds=1))
    second = enqueue("test.noop", {"edit": 2}, debounce=5, debounce_key="doc:7")
    assert second.id == first.id and second.payload == {"edit": 2}
    second.refresh_from_db()
    assert second.payload == {"edit": 2} and not second.ready
    assert second.available_at - db_now() > dt.timedelta(seconds=4)  # the window's end again
    assert Job.objects.filter(type="test.noop").count() == 1


def test_debounce_keep_first_keeps_the_first_payload() -> None:
    first = enqueue("test.noop", {"edit": 1}, debounce=5, debounce_key="doc:7", debounce_keep="first")
    second = enqueue("test.noop", {"edit": 2}, debounce=5, debounce_key="doc:7", debounce_keep="first")
    assert second.id == first.id and second.payload == {"edit": 1}


def test_debounce_never_moves_a_start_earlier() -> None:
    first = enqueue("test.noop", {}, debounce=60, debounce_key="doc:7")
    second = enqueue("test.noop", {}, debounce=1, debounce_key="doc:7")
    assert second.id == first.id and second.available_at == first.available_at


def test_once_the_debounced_job_started_a_new_job_is_made() -> None:
    first = enqueue("test.noop", {"edit": 1}, debounce=5, debounce_key="doc:7")
    Job.objects.filter(id=first.id).update(available_at=Now() - dt.timedelta(hours=1), ready=True)
    assert run_one().id == first.id  # type: ignore[union-attr]
    second = enqueue("test.noop", {"edit": 2}, debounce=5, debounce_key="doc:7")
    assert second.id != first.id and second.status == JobStatus.PENDING
    first.refresh_from_db()
    assert first.payload == {"edit": 1} and first.status == JobStatus.COMPLETED


def test_a_pending_job_that_ran_before_is_not_debounced_into() -> None:
    """A retry's job started once: its payload is what that execution saw; a new job is made."""
    first = enqueue("test.noop", {"edit": 1}, debounce=5, debounce_key="doc:7")
    Job.objects.filter(id=first.id).update(attempts=1)
    assert enqueue("test.noop", {"edit": 2}, debounce=5, debounce_key="doc:7").id != first.id


# ---- a start-by deadline ------------------------------------------------------------------------


def test_expires_in_and_start_by_are_stored(db_now: Callable[[], Any]) -> None:
    job = enqueue("test.noop", {}, expires_in=600)
    stored = Job.objects.get(id=job.id)
    assert job.start_by == stored.start_by
    assert dt.timedelta(seconds=599) < stored.start_by - db_now() <= dt.timedelta(seconds=600)  # type: ignore[operator]
    when = db_now() + dt.timedelta(hours=1)
    assert Job.objects.get(id=enqueue("test.noop", {}, start_by=when).id).start_by == when
    many = enqueue_many("test.noop", [{}, {}], expires_in=dt.timedelta(minutes=5))
    assert {j.start_by for j in many} == {j.start_by for j in Job.objects.filter(id__in=[j.id for j in many])}


def test_a_plain_enqueue_has_no_deadline_and_no_debounce_key() -> None:
    job = Job.objects.get(id=enqueue("test.noop", {}).id)
    assert job.start_by is None and job.debounce_key is None


def test_a_claimed_job_past_its_deadline_ends_expired_instead_of_running() -> None:
    job = enqueue("test.noop", {}, expires_in=600)
    Job.objects.filter(id=job.id).update(start_by=Now() - dt.timedelta(seconds=1))
    ended = run_one()
    assert ended is not None and ended.id == job.id
    assert (ended.status, ended.last_error_code, ended.attempts) == (
        JobStatus.CANCELLED,
        ErrorCode.EXPIRED,
        0,
    )
    assert ended.completed_at is None and ended.finished_at is not None
    event = JobEvent.objects.get(job=job)
    assert (event.kind, event.from_status, event.to_status, event.actor) == (
        EventKind.EXPIRED, JobStatus.RUNNING, JobStatus.CANCELLED, "worker",
    )  # fmt: skip


def test_a_claimed_job_before_its_deadline_runs() -> None:
    job = enqueue("test.noop", {}, expires_in=600)
    ended = run_one()
    assert ended is not None and (ended.id, ended.status) == (job.id, JobStatus.COMPLETED)


def test_the_reaper_ends_pending_jobs_past_their_deadline_and_no_other() -> None:
    late = enqueue("test.noop", {}, expires_in=600, delay=60)
    timely = enqueue("test.noop", {}, expires_in=600)
    plain = JobFactory()
    Job.objects.filter(id=late.id).update(start_by=Now() - dt.timedelta(seconds=1))
    result = reaper.run_once()
    assert result.expired == [("test.noop", "default")] and result.as_dict()["expired"] == 1
    late.refresh_from_db()
    assert (late.status, late.last_error_code) == (JobStatus.CANCELLED, ErrorCode.EXPIRED)
    assert "start-by deadline" in (late.last_error or "")
    assert JobEvent.objects.get(job=late).actor == "reaper"
    assert Job.objects.get(id=timely.id).status == Job.objects.get(id=plain.id).status == JobStatus.PENDING


def test_explainjob_shows_the_deadline_says_when_it_passed_and_that_the_job_expired() -> None:
    job = enqueue("test.noop", {}, expires_in=600)
    assert "start by" in dict(explain(job.id).evidence)
    Job.objects.filter(id=job.id).update(start_by=Now() - dt.timedelta(seconds=1))
    past = explain(job.id)
    assert past.reason == Reason.EXPIRED and "never starts" in past.sentence
    reaper.run_once()
    ended = explain(job.id)
    assert ended.reason == Reason.EXPIRED and "the reaper ended it cancelled (code EXPIRED)" in ended.sentence


def test_explainjob_shows_a_debounce_key() -> None:
    job = enqueue("test.noop", {}, debounce=5, debounce_key="doc:7")
    assert dict(explain(job.id).evidence)["debounce key"].startswith("doc:7")


# ---- refused before anything is written -------------------------------------------------------

_PAST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_LATER = dt.datetime(2999, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: enqueue("test.noop", {}, unique_key="k", unique_for=0), "unique_for"),
        (lambda: enqueue("test.noop", {}, unique_key="k", unique_for=-5), "unique_for"),
        (lambda: enqueue("test.noop", {}, unique_key="k", unique_for="soon"), "unique_for"),
        (lambda: enqueue("test.noop", {}, unique_for=60), "needs a unique_key"),
        (lambda: enqueue("test.noop", {}, debounce=5), "needs a debounce_key"),
        (lambda: enqueue("test.noop", {}, debounce=0, debounce_key="d"), "debounce"),
        (lambda: enqueue("test.noop", {}, debounce_key="d"), "need debounce"),
        (
            lambda: enqueue("test.noop", {}, debounce=5, debounce_key="d", debounce_keep="middle"),
            "debounce_keep",
        ),
        (lambda: enqueue("test.noop", {}, debounce=5, debounce_key=""), "debounce_key"),
        (lambda: enqueue("test.noop", {}, debounce=5, debounce_key="d", delay=3), "no run_at or delay"),
        (lambda: enqueue("test.noop", {}, debounce=5, debounce_key="d", unique_key="k"), "contradicts"),
        (lambda: enqueue("test.noop", {}, debounce=5, debounce_key="d", expires_in=60), "deadline"),
        (lambda: enqueue("test.noop", {}, expires_in=0), "expires_in"),
        (lambda: enqueue("test.noop", {}, expires_in=float("nan")), "expires_in"),
        (lambda: enqueue("test.noop", {}, start_by=_PAST), "in the past"),
        (lambda: enqueue("test.noop", {}, start_by=_LATER, expires_in=60), "not both"),
        (lambda: enqueue("test.noop", {}, start_by=dt.datetime(2999, 1, 1)), "timezone-aware"),
        (lambda: enqueue("test.noop", {}, expires_in=60, delay=60), "expire before it is due"),
        (lambda: enqueue("test.noop", {}, expires_in=60, run_at=_LATER), "expire before it is due"),
        (lambda: enqueue("test.noop", {}, start_by=_LATER, run_at=_LATER), "expire before it is due"),
        (lambda: enqueue_many("test.noop", [{}], start_by=_PAST), "in the past"),
    ],
)
def test_bad_controls_are_refused_and_nothing_is_written(call: Callable[[], object], message: str) -> None:
    JobFactory()
    with pytest.raises(InvalidOption, match=message):
        call()
    assert Job.objects.count() == 1
