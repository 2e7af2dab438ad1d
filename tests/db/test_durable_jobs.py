"""Durable jobs in a ``TestCase``: steps that run once across retries and crashes, sleeps that
end the execution, waits that a signal ends, and the bad input each refuses (docs/durable-jobs.md).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from django.db import transaction
from django.db.models.functions import Now
from django.test import TestCase

from django_jobs import InvalidOption, InvalidSignal, UnknownSignalKey, enqueue, signal
from django_jobs.models import Job, JobEvent, JobSignal, JobStep, SignalKey
from django_jobs.observe.diagnosis import Reason, explain
from django_jobs.states import EventKind, JobStatus
from django_jobs.testing import assert_steps, deliver, recorded_steps, run_durable, run_one, wake, where
from django_jobs.transitions import prune
from testproject.testjobs.durable_jobs import DurableCrash
from testproject.testjobs.models import EffectLog


def effects(run: str) -> dict[str, int]:
    """How many times each step's business effect happened, by step name."""
    counts: dict[str, int] = {}
    for key in EffectLog.objects.filter(key__startswith=f"{run}:").values_list("key", flat=True):
        name = key.split(":", 1)[1]
        counts[name] = counts.get(name, 0) + 1
    return counts


def durable(run: str, script: list[list[Any]], **payload: Any) -> Job:
    return enqueue("test.durable", {"run": run, "script": script, **payload}, **payload.pop("options", {}))


class Steps(TestCase):
    def test_steps_record_their_results_and_a_completed_job_returns_them(self) -> None:
        job = durable("a", [["step", "one"], ["step", "two"]])
        ended = run_durable(job)
        assert (ended.status, ended.return_value, ended.attempts) == (JobStatus.COMPLETED, ["one", "two"], 1)
        assert_steps(job, ["one", "two"])
        assert [(s.kind, s.result, s.state) for s in recorded_steps(job)] == [
            ("step", "one", "done"),
            ("step", "two", "done"),
        ]
        assert effects("a") == {"one": 1, "two": 1}

    def test_a_crash_inside_a_step_rolls_its_effect_back_and_the_retry_runs_it_once(self) -> None:
        job = durable(
            "b", [["step", "one"], ["step", "two"]], crash_plan=["inside:two"], crash_by="exception"
        )
        with pytest.raises(DurableCrash):
            run_one()
        # The first step committed with its record; the second's effect rolled back with it.
        assert effects("b") == {"one": 1}
        assert_steps(job, ["one"])
        Job.objects.filter(id=job.id).update(status=JobStatus.PENDING)  # as the reaper would
        ended = run_durable(job)
        assert ended.status == JobStatus.COMPLETED
        assert effects("b") == {"one": 1, "two": 1}

    def test_a_crash_between_steps_replays_the_recorded_ones_without_running_them(self) -> None:
        job = durable(
            "c", [["step", "one"], ["step", "two"], ["step", "three"]],
            crash_plan=["before:three"], crash_by="exception",
        )  # fmt: skip
        with pytest.raises(DurableCrash):
            run_one()
        assert effects("c") == {"one": 1, "two": 1}
        Job.objects.filter(id=job.id).update(status=JobStatus.PENDING)
        assert run_durable(job).return_value == ["one", "two", "three"]
        assert effects("c") == {"one": 1, "two": 1, "three": 1}

    def test_a_result_that_is_not_json_fails_the_job_and_writes_nothing(self) -> None:
        job = durable("d", [["bad_step", "odd"]])
        ended = run_durable(job)
        assert (ended.status, ended.last_error_code) == (JobStatus.FAILED, "STEP_INVALID")
        assert "not plain JSON" in (ended.last_error or "") or "set" in (ended.last_error or "")
        assert not JobStep.objects.filter(job=job).exists()

    def test_a_name_met_twice_is_refused(self) -> None:
        job = durable("e", [["step", "one"], ["step", "one"]])
        ended = run_durable(job)
        assert (ended.status, ended.last_error_code) == (JobStatus.FAILED, "STEP_INVALID")
        assert "met twice" in (ended.last_error or "")
        assert effects("e") == {"one": 1}

    def test_a_replay_that_meets_another_step_at_a_recorded_position_is_a_mismatch(self) -> None:
        job = durable("f", [["step", "one"], ["sleep", 3600]])
        run_durable(job)
        payload = {**job.payload, "script": [["step", "renamed"], ["sleep", 3600]]}
        Job.objects.filter(id=job.id).update(payload=payload)
        wake(job)
        ended = run_durable(job)
        assert (ended.status, ended.last_error_code) == (JobStatus.FAILED, "STEP_REPLAY_MISMATCH")
        assert "'one'" in (ended.last_error or "") and "'renamed'" in (ended.last_error or "")


class Sleeps(TestCase):
    def test_a_sleep_ends_the_execution_and_the_job_is_pending_at_its_wake_time_unCounted(self) -> None:
        job = durable("s", [["step", "one"], ["sleep", 3600], ["step", "two"]])
        slept = run_durable(job)
        assert (slept.status, slept.attempts, slept.lease_expires_at) == (JobStatus.PENDING, 0, None)
        parked = where(job)
        assert parked is not None and parked.kind == "sleep"
        assert parked.until == slept.available_at
        assert dt.timedelta(minutes=59) < slept.available_at - parked.now <= dt.timedelta(hours=1)
        event = JobEvent.objects.filter(job=job).latest("id")
        assert (event.kind, event.to_status) == (EventKind.SUSPENDED, JobStatus.PENDING)
        assert run_one() is None  # not due
        wake(job)
        ended = run_durable(job)
        assert (ended.status, ended.return_value) == (JobStatus.COMPLETED, ["one", "two"])
        assert effects("s") == {"one": 1, "two": 1}
        assert_steps(job, ["step:one", "sleep:sleep#2", "step:two"], kinds=True)

    def test_a_sleep_until_a_past_time_goes_on_at_once(self) -> None:
        job = durable("t", [["sleep_until", "2000-01-01T00:00:00+00:00"], ["step", "one"]])
        assert run_durable(job).status == JobStatus.COMPLETED

    def test_bad_sleeps_are_refused_and_nothing_is_recorded(self) -> None:
        for seconds in (-1, "inf", "nan", 10**9, "soon", True):
            job = durable(f"bad{seconds}", [["sleep", seconds]])
            ended = run_durable(job)
            assert (ended.status, ended.last_error_code) == (JobStatus.FAILED, "STEP_INVALID"), seconds
            assert not JobStep.objects.filter(job=job).exists()
        naive = durable("naive", [["sleep_until", "2030-01-01T00:00:00"]])
        assert run_durable(naive).last_error_code == "STEP_INVALID"

    def test_a_sleep_inside_a_transaction_of_the_handler_is_refused_and_rolls_its_steps_back(self) -> None:
        job = durable("in-tx", [["step", "one"], ["sleep_in_a_transaction", "two"]])
        ended = run_durable(job)
        assert (ended.status, ended.last_error_code) == (JobStatus.FAILED, "STEP_INVALID")
        assert "inside transaction.atomic()" in (ended.last_error or "")
        assert effects("in-tx") == {"one": 1}
        assert_steps(job, ["one"])

    def test_wake_refuses_a_job_that_does_not_sleep(self) -> None:
        job = durable("w", [["step", "one"]])
        with pytest.raises(AssertionError, match="does not sleep"):
            wake(job)


class Signals(TestCase):
    def test_a_signal_ends_the_wait_and_the_job_gets_its_data(self) -> None:
        job = durable("p", [["step", "one"], ["wait", "paid", 3600], ["step", "two"]], options={})
        with transaction.atomic():
            job = enqueue("test.durable", job.payload, signal_key="shop:p")
        waiting = run_durable(job)
        assert waiting.status == JobStatus.PENDING
        parked = where(job)
        assert parked is not None and (parked.kind, parked.name, parked.key) == ("wait", "paid", "shop:p")
        assert parked.until == waiting.available_at
        assert deliver("shop:p", "paid", {"amount": 1200}) is True
        ended = run_durable(job)
        assert (ended.status, ended.return_value) == (JobStatus.COMPLETED, ["one", {"amount": 1200}, "two"])
        assert [s.state for s in recorded_steps(job)] == ["done", "signalled", "done"]

    def test_a_signal_sent_before_the_wait_is_kept_and_taken_at_once(self) -> None:
        job = enqueue("test.durable", {"run": "q", "script": [["wait", "paid", 60]]}, signal_key="shop:q")
        assert signal("shop:q", "paid", "early") is True
        ended = run_durable(job)
        assert (ended.status, ended.return_value) == (JobStatus.COMPLETED, ["early"])

    def test_the_first_signal_of_a_name_stands_and_a_second_is_not_stored(self) -> None:
        job = enqueue("test.durable", {"run": "r", "script": [["wait", "paid", 60]]}, signal_key="shop:r")
        assert signal("shop:r", "paid", 1) is True
        assert signal("shop:r", "paid", 2) is False
        assert run_durable(job).return_value == [1]
        assert list(JobSignal.objects.filter(job=job).values_list("data", flat=True)) == [1]

    def test_a_signal_rolled_back_with_its_transaction_was_never_sent(self) -> None:
        job = enqueue("test.durable", {"run": "u", "script": [["wait", "paid", 60]]}, signal_key="shop:u")
        run_durable(job)
        with pytest.raises(RuntimeError), transaction.atomic():
            signal("shop:u", "paid", {})
            raise RuntimeError("the webhook's own write failed")
        assert not JobSignal.objects.filter(job=job).exists()
        assert Job.objects.get(id=job.id).available_at > where(job).now  # type: ignore[union-attr]

    def test_bad_signals_are_refused_with_nothing_written(self) -> None:
        enqueue("test.durable", {"run": "v", "script": []}, signal_key="shop:v")
        with pytest.raises(UnknownSignalKey, match="no job has signal key 'shop:nobody'"):
            signal("shop:nobody", "paid", {})
        for key, name, data in (
            ("shop:v", "paid", {1, 2}),
            ("shop:v", "", {}),
            ("shop:v", "has space", {}),
            ("", "paid", {}),
            ("shop:v", "paid", {"nan": float("nan")}),
        ):
            with pytest.raises(InvalidSignal):
                signal(key, name, data)
        assert not JobSignal.objects.exists()

    def test_a_signal_key_addresses_one_job(self) -> None:
        enqueue("test.durable", {"run": "x", "script": []}, signal_key="shop:x")
        count = Job.objects.count()
        with pytest.raises(InvalidOption, match="another job's"):
            enqueue("test.durable", {"run": "y", "script": []}, signal_key="shop:x")
        with pytest.raises(InvalidOption):
            enqueue("test.durable", {"run": "y", "script": []}, signal_key="has space")
        assert Job.objects.count() == count and SignalKey.objects.count() == 1

    def test_a_wait_needs_a_timeout_within_a_year(self) -> None:
        for timeout in (0, -5, 10**9):
            job = durable(f"to{timeout}", [["wait", "paid", timeout]])
            ended = run_durable(job)
            assert (ended.status, ended.last_error_code) == (JobStatus.FAILED, "STEP_INVALID"), timeout


@pytest.mark.django_db(transaction=True)
class TestExplain:
    def test_a_sleeping_job_says_until_when(self) -> None:
        job = durable("ex1", [["step", "one"], ["sleep", 7200]])
        run_durable(job)
        why = explain(job.id)
        assert why.reason == Reason.SLEEPING
        assert why.sentence.startswith("It is sleeping until ")
        assert "(in 1h 59m" in why.sentence or "(in 2h 0m" in why.sentence

    def test_a_waiting_job_says_which_signal_on_which_key_since_when_and_its_timeout(self) -> None:
        job = enqueue(
            "test.durable", {"run": "ex2", "script": [["wait", "paid", 3600]]}, signal_key="stripe:pi_1"
        )
        run_durable(job)
        why = explain(job.id)
        assert why.reason == Reason.WAITING_FOR_SIGNAL
        assert "waiting for signal `paid` on key `stripe:pi_1` since " in why.sentence
        assert ", times out at " in why.sentence
        signal("stripe:pi_1", "paid", {})
        assert explain(job.id).reason != Reason.WAITING_FOR_SIGNAL  # due now
        assert run_durable(job).status == JobStatus.COMPLETED

    def test_a_wait_times_out_and_the_handler_decides(self) -> None:
        job = enqueue("test.durable", {"run": "ex3", "script": [["wait", "paid", 0.5]]}, signal_key="k:3")
        waiting = run_durable(job)
        assert waiting.status == JobStatus.PENDING
        deadline = time.monotonic() + 10
        while run_one() is None:
            assert time.monotonic() < deadline, "the wait did not time out"
            time.sleep(0.05)
        ended = Job.objects.get(id=job.id)
        assert (ended.status, ended.return_value) == (JobStatus.COMPLETED, ["timed out"])
        assert [s.state for s in recorded_steps(job)] == ["timed out"]
        # A signal after the timeout is kept, and changes nothing.
        assert signal("k:3", "paid", {}) is True
        assert Job.objects.get(id=job.id).status == JobStatus.COMPLETED

    def test_a_sleep_of_a_second_ends_by_itself(self) -> None:
        job = durable("ex4", [["step", "one"], ["sleep", 0.3], ["step", "two"]])
        run_durable(job)
        deadline = time.monotonic() + 10
        while run_one() is None:
            assert time.monotonic() < deadline, "the sleep did not end"
            time.sleep(0.05)
        assert Job.objects.get(id=job.id).status == JobStatus.COMPLETED
        assert effects("ex4") == {"one": 1, "two": 1}

    def test_retention_removes_a_durable_jobs_records_with_it(self) -> None:
        job = enqueue("test.durable", {"run": "ex5", "script": [["step", "one"]]}, signal_key="k:5")
        signal("k:5", "unused", 1)
        run_durable(job)
        Job.objects.filter(id=job.id).update(finished_at=Now() - dt.timedelta(days=400))
        assert prune(JobStatus.COMPLETED, 3600, 100).deleted == 1
        assert not (JobStep.objects.exists() or JobSignal.objects.exists() or SignalKey.objects.exists())
