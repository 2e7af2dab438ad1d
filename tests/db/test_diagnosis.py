"""``explain()``: one test per reason a job is not running, on real rows and real workers' rows."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from django_jobs import enqueue, enqueue_many, job, pause_queue, transitions
from django_jobs.console import restore_holds
from django_jobs.limits import RateLimit
from django_jobs.maintenance import reaper
from django_jobs.models import Job, LiveWorker
from django_jobs.observe.diagnosis import JobNotFound, Reason, explain, parse_job_id
from django_jobs.registry import registry
from django_jobs.runtime.worker import Worker
from django_jobs.testing import run_one
from django_jobs.transitions import ClaimStatement, claim, open_rate_windows
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "diag"
KNOWN = {t.name: t.version for t in registry.all()}


def live_worker(
    worker_id: str, queues: str = "", job_types: dict[str, int] | None = None, silent_for: float = 0
) -> None:
    """A worker's row as ``runjobs`` reports it (``job_types``: what its code runs)."""
    transitions.report_worker(
        worker_id=worker_id,
        hostname="host",
        pid=1,
        queues=queues,
        concurrency=4,
        running=0,
        processed=0,
        job_types=KNOWN if job_types is None else job_types,
    )
    if silent_for:
        LiveWorker.objects.filter(worker_id=worker_id).update(
            last_seen_at=Now() - dt.timedelta(seconds=silent_for)
        )


def evidence(job_id: int) -> dict[str, str]:
    return dict(explain(job_id).evidence)


@pytest.fixture
def hourly() -> Iterator[str]:
    """A type allowed one start an hour."""

    @job("test.diag_hourly", rate_limit="1/h")
    def hourly(ctx: object, payload: object) -> None:
        """Never run here."""

    yield "test.diag_hourly"
    registry.unregister("test.diag_hourly")


# ---- scheduled later ----------------------------------------------------------------------------


def test_a_job_retried_after_a_failure_says_backoff_after_which_attempt() -> None:
    live_worker("w1")
    retried = enqueue("test.rate_limited", {"retry_after": 600}, queue=QUEUE)
    assert run_one(queues=[QUEUE]) is not None
    why = explain(retried.id)
    assert why.reason == Reason.BACKOFF
    assert re.search(r"retry in 1?\d+m \d+s \(at ", why.sentence)  # no earlier than the 600 s asked
    assert "after attempt 1 failed with RATE_LIMITED" in why.sentence
    assert "Retry-After" in why.sentence


def test_a_job_enqueued_with_a_delay_says_when_it_is_due() -> None:
    live_worker("w1")
    later = enqueue("test.noop", {}, queue=QUEUE, delay=7200)
    why = explain(later.id)
    assert why.reason == Reason.DELAYED
    assert (
        why.sentence.startswith("It was enqueued to run later: it is due in 1h 59m")
        or "in 2h 0m" in why.sentence
    )


def test_a_job_of_a_type_whose_rate_window_is_full_says_when_room_opens(hourly: str) -> None:
    live_worker("w1", job_types={hourly: 1})
    first, second = enqueue_many(hourly, [{}, {}], queue=QUEUE)
    statement = ClaimStatement("w1", [QUEUE], {hourly: 1}, rate_limits={hourly: RateLimit(1, 3600)})
    open_rate_windows(statement.rate_limited)
    assert [c.id for c in claim(statement, 10)] == [first.id]
    why = explain(second.id)
    assert why.reason == Reason.RATE_LIMITED
    assert "(1 starts per 3600s) is used up: room opens in 59m" in why.sentence


# ---- people, workers, limits ------------------------------------------------------------------------


def test_a_job_in_a_paused_queue_says_who_paused_it_since_when_and_why() -> None:
    live_worker("w1")
    waiting = enqueue("test.noop", {}, queue=QUEUE)
    pause_queue(QUEUE, actor="ops-anna", reason="provider maintenance until 14:00")
    why = explain(waiting.id)
    assert why.reason == Reason.QUEUE_PAUSED
    assert "paused, by ops-anna since" in why.sentence and "provider maintenance until 14:00" in why.sentence


def test_a_job_of_an_external_type_under_a_restore_hold_says_which_hold() -> None:
    live_worker("w1")
    held = enqueue("test.unsafe", {}, queue=QUEUE)
    inside = enqueue("test.noop", {}, queue=QUEUE)
    hold = restore_holds.declare(actor="ops", reason="restored last night's backup")
    why = explain(held.id)
    assert why.reason == Reason.RESTORE_HOLD
    assert f"Restore hold {hold} is open (declared by an operator" in why.sentence
    assert "test.unsafe" in why.sentence and "manage.py jobsrestore" in why.sentence
    assert explain(inside.id).reason != Reason.RESTORE_HOLD


def test_a_due_job_with_no_live_worker_on_its_queue_says_so_and_names_the_silent_ones() -> None:
    live_worker("elsewhere", queues="emails")
    live_worker("frozen", queues=QUEUE, silent_for=600)
    waiting = enqueue("test.noop", {}, queue=QUEUE)
    why = explain(waiting.id)
    assert why.reason == Reason.NO_WORKER
    assert f"No live worker serves its queue {QUEUE}: 1 that did are silent" in why.sentence
    assert "frozen (silent 600s)" in evidence(waiting.id)["silent workers serving its queue"]


def test_a_job_whose_type_no_live_worker_runs_says_so() -> None:
    live_worker("old-release", job_types={"test.noop": 1})
    waiting = enqueue("test.record", {}, queue=QUEUE)
    why = explain(waiting.id)
    assert why.reason == Reason.TYPE_UNKNOWN
    assert "runs job type test.record" in why.sentence


def test_a_job_whose_payload_version_no_live_worker_reads_says_which_they_read() -> None:
    live_worker("old-release", job_types={"test.versioned": 3})
    newer = JobFactory(type="test.versioned", version=4, queue=QUEUE, available_at=timezone.now())
    why = explain(newer.id)
    assert why.reason == Reason.VERSION_UNSUPPORTED
    assert "version 4 is newer than any live worker of queue diag reads (newest: 3)" in why.sentence


def test_a_job_whose_concurrency_key_is_held_names_the_job_holding_it() -> None:
    live_worker("w1")
    first, second = enqueue_many("test.keyed_once", [{}, {}], queue=QUEUE, concurrency_key="customer:7")
    statement = ClaimStatement("w1", [QUEUE], KNOWN)
    assert [c.id for c in claim(statement, 10)] == [first.id]
    why = explain(second.id)
    assert why.reason == Reason.CONCURRENCY_KEY_HELD
    assert f"customer:7 is held by job {first.id} (on w1)" in why.sentence


def test_a_due_claimable_job_names_the_live_workers_that_could_take_it() -> None:
    live_worker("w-all")
    live_worker("w-emails", queues="emails")
    waiting = enqueue("test.noop", {}, queue=QUEUE)
    why = explain(waiting.id)
    assert why.reason == Reason.CLAIMABLE
    assert "w-all could" in why.sentence and "w-emails" not in why.sentence
    assert evidence(waiting.id)["claim rule of this code"] == "claimable now"


def test_when_several_reasons_apply_the_first_blocker_speaks_and_the_others_are_evidence() -> None:
    later = enqueue("test.noop", {}, queue=QUEUE, delay=60)
    pause_queue(QUEUE, actor="ops", reason="incident 42")
    why = explain(later.id)
    assert why.reason == Reason.QUEUE_PAUSED
    assert why.also == [Reason.DELAYED, Reason.NO_WORKER]
    also = [value for label, value in why.evidence if label == "also"]
    assert also[0].startswith("It was enqueued to run later") and also[1].startswith("No live worker")


# ---- running --------------------------------------------------------------------------------------


def test_a_running_job_names_its_live_worker_and_its_lease() -> None:
    live_worker("w1")
    running = enqueue("test.noop", {}, queue=QUEUE)
    assert [c.id for c in claim(ClaimStatement("w1", [QUEUE], KNOWN), 1)] == [running.id]
    why = explain(running.id)
    assert why.reason == Reason.RUNNING
    assert (
        "running on worker w1, alive (reported 0s ago)" in why.sentence and "lease runs until" in why.sentence
    )


def test_a_job_running_on_a_silent_worker_says_for_how_long_it_is_silent() -> None:
    live_worker("w1", silent_for=120)
    running = enqueue("test.noop", {}, queue=QUEUE)
    claim(ClaimStatement("w1", [QUEUE], KNOWN), 1)
    why = explain(running.id)
    assert why.reason == Reason.RUNNING_WORKER_SILENT
    assert "silent for 120s" in why.sentence


def test_a_running_job_whose_lease_expired_says_the_reaper_will_take_it_back() -> None:
    stale = JobFactory(running_stale=True, queue=QUEUE)
    why = explain(stale.id)
    assert why.reason == Reason.RUNNING_LEASE_EXPIRED
    assert "which no longer reports" in why.sentence and "lease expired 59m" in why.sentence


def test_a_running_job_with_a_cancel_request_says_so_first() -> None:
    live_worker("w1")
    running = enqueue("test.noop", {}, queue=QUEUE)
    claim(ClaimStatement("w1", [QUEUE], KNOWN), 1)
    assert transitions.cancel(running.id, actor="ops", reason="wrong customer") == "requested"
    why = explain(running.id)
    assert why.reason == Reason.CANCEL_REQUESTED and why.also == [Reason.RUNNING]


# ---- finished or parked -----------------------------------------------------------------------------


def test_a_completed_job_says_when() -> None:
    done = enqueue("test.noop", {}, queue=QUEUE)
    run_one(queues=[QUEUE])
    why = explain(done.id)
    assert why.reason == Reason.COMPLETED and "after 1 attempt(s)" in why.sentence


def test_a_job_that_failed_with_a_permanent_error_gives_its_code() -> None:
    failed = enqueue("test.permanent", {}, queue=QUEUE)
    run_one(queues=[QUEUE])
    why = explain(failed.id)
    code = Job.objects.get(id=failed.id).last_error_code
    assert why.reason == Reason.FAILED and f"with {code}, an error that is not retried" in why.sentence


def test_a_job_that_used_all_its_attempts_says_so() -> None:
    poison = enqueue("test.poison", {}, queue=QUEUE, max_attempts=1)
    run_one(queues=[QUEUE])
    why = explain(poison.id)
    assert why.reason == Reason.ATTEMPTS_EXHAUSTED and "after using all 1 attempts" in why.sentence


def test_a_job_parked_for_review_says_why() -> None:
    parked = JobFactory(type="test.unsafe", running_stale=True, queue=QUEUE)
    reaper.run_once()
    assert Job.objects.get(id=parked.id).status == "needs_review"
    why = explain(parked.id)
    assert why.reason == Reason.NEEDS_REVIEW and why.sentence.startswith("It is parked for review (")


def test_a_skipped_job_says_its_handler_found_it_no_longer_applies() -> None:
    skipped = enqueue("test.skip", {}, queue=QUEUE)
    run_one(queues=[QUEUE])
    why = explain(skipped.id)
    assert why.reason == Reason.SKIPPED and "no longer applies" in why.sentence


def test_a_cancelled_job_says_who_cancelled_it_and_why() -> None:
    waiting = enqueue("test.noop", {}, queue=QUEUE)
    transitions.cancel(waiting.id, actor="ops", reason="duplicate order")
    why = explain(waiting.id)
    assert (
        why.reason == Reason.CANCELLED
        and "cancelled by ops" in why.sentence
        and "duplicate order" in why.sentence
    )


# ---- workers say what they run, once ------------------------------------------------------------------


def test_a_worker_records_the_types_it_runs_with_its_first_report_only() -> None:
    worker = Worker(queues=[QUEUE], worker_id="w-types")
    worker._presence.report_alive()
    row = LiveWorker.objects.get(worker_id="w-types")
    # The registry as it is now: modules collected after this one register tasks of their own.
    assert row.job_types == {t.name: t.version for t in registry.all()}
    assert row.job_types["test.versioned"] == 3
    LiveWorker.objects.filter(worker_id="w-types").update(job_types={})
    worker._presence.report_alive()  # a heartbeat: the types are not written again
    assert LiveWorker.objects.get(worker_id="w-types").job_types == {}


# ---- hostile input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["abc", "-1", "0", "1.5", "", " ", "9" * 30, "١٢", "1e3"])
def test_a_job_id_that_no_job_can_have_is_refused_plainly(text: str) -> None:
    with pytest.raises(ValueError, match="is not a job id"):
        parse_job_id(text)


def test_a_missing_job_is_reported_as_missing() -> None:
    with pytest.raises(JobNotFound, match="no job has id 999999"):
        explain(999999)
    with pytest.raises(ValueError, match="is not a job id"):
        explain(-3)
