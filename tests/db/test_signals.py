"""``job_enqueued``, ``job_started`` and ``job_finished``: sent once what they describe has
committed, in that order, with what integrations need; a receiver that raises changes nothing."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import TestCase

from django_jobs import enqueue
from django_jobs.maintenance import reaper
from django_jobs.models import Job
from django_jobs.runtime.worker import Worker
from django_jobs.signals import job_enqueued, job_finished, job_started, listened
from django_jobs.states import JobStatus
from django_jobs.testing import run_jobs, run_one, run_until_settled
from testproject.shop.models import Order
from tests.factories import JobFactory

SIGNALS = {"enqueued": job_enqueued, "started": job_started, "finished": job_finished}


class Heard(list[tuple[str, dict[str, Any]]]):
    """What the receivers heard, in order: (signal, its arguments)."""

    def of(self, job_id: int) -> list[tuple[str, dict[str, Any]]]:
        return [
            (name, kw) for name, kw in self if kw.get("job_id", getattr(kw.get("job"), "id", None)) == job_id
        ]

    def names(self, job_id: int) -> list[str]:
        return [name for name, _ in self.of(job_id)]

    def finished(self, job_id: int) -> list[dict[str, Any]]:
        return [kw for name, kw in self.of(job_id) if name == "finished"]


@pytest.fixture
def heard() -> Iterator[Heard]:
    heard = Heard()
    receivers = {}
    for name, signal in SIGNALS.items():

        def receiver(sender: type, name: str = name, **kwargs: Any) -> None:
            assert sender is Job
            kwargs.pop("signal")
            heard.append((name, kwargs))

        receivers[name] = receiver
        signal.connect(receiver)
    yield heard
    for name, signal in SIGNALS.items():
        signal.disconnect(receivers[name])


@pytest.mark.django_db(transaction=True)
class TestFromARealWorker:
    def test_a_job_that_completes(self, heard: Heard) -> None:
        with transaction.atomic():
            job = enqueue("test.record", {"key": "signals:1"})
            assert heard.names(job.id) == []  # not before the commit
        assert heard.names(job.id) == ["enqueued"]
        assert heard.of(job.id)[0][1]["job"].payload == {"key": "signals:1"}
        stats = run_jobs()
        job.refresh_from_db()
        assert heard.names(job.id) == ["enqueued", "started", "finished"]
        started, finished = heard.of(job.id)[1][1], heard.of(job.id)[2][1]
        assert started == {
            "job_id": job.id, "type": "test.record", "queue": "default", "attempt": 1,
            "execution_id": job.execution_id, "worker_id": job.worker_id,
            "created_at": job.created_at, "available_at": job.available_at,
        }  # fmt: skip
        assert started["available_at"] <= job.started_at  # the pickup latency: the claim came after
        duration = finished.pop("duration")
        assert finished == {
            "job_id": job.id, "type": "test.record", "queue": "default", "status": "completed",
            "attempt": 1, "execution_id": job.execution_id, "worker_id": job.worker_id,
            "error_code": None, "error": None,
        }  # fmt: skip
        assert 0 <= duration < 10 and stats.outcomes["completed"] == 1

    def test_a_retried_job_finishes_once_per_execution(self, heard: Heard) -> None:
        job = enqueue("test.flaky", {"succeed_on": 3})
        run_until_settled()
        assert heard.names(job.id) == ["enqueued"] + ["started", "finished"] * 3
        finished = heard.finished(job.id)
        assert [(f["status"], f["attempt"], f["error_code"]) for f in finished] == [
            ("pending", 1, "PROVIDER_5XX"), ("pending", 2, "PROVIDER_5XX"), ("completed", 3, None),
        ]  # fmt: skip
        assert "temporary failure on attempt 1" in finished[0]["error"]
        assert len({f["execution_id"] for f in finished}) == 3

    def test_failures_skips_and_parked_jobs_say_so(self, heard: Heard) -> None:
        failed = enqueue("test.permanent", {})
        skipped = enqueue("test.skip", {})
        parked = enqueue("test.unsafe_send", {})
        leaky = enqueue("test.leaky", {}, max_attempts=1)
        run_jobs()
        outcomes = {job.id: heard.finished(job.id)[-1] for job in (failed, skipped, parked, leaky)}
        assert (outcomes[failed.id]["status"], outcomes[failed.id]["error_code"]) == (
            "failed",
            "ENTITY_NOT_FOUND",
        )
        assert (outcomes[skipped.id]["status"], outcomes[skipped.id]["error_code"]) == ("skipped", "SKIPPED")
        assert (outcomes[parked.id]["status"], outcomes[parked.id]["error_code"]) == (
            "needs_review", "NETWORK_TIMEOUT",
        )  # fmt: skip
        # The error a receiver gets is the stored one: sanitized.
        assert outcomes[leaky.id]["status"] == "failed"
        assert (
            "hunter2" not in outcomes[leaky.id]["error"] and "PermissionError" in outcomes[leaky.id]["error"]
        )

    def test_a_rolled_back_or_deduplicated_enqueue_announces_nothing(self, heard: Heard) -> None:
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue("test.noop", {})
            raise RuntimeError("the view failed after enqueueing")
        first = enqueue("test.noop", {}, unique_key="once")
        again = enqueue("test.noop", {}, unique_key="once")
        assert again.id == first.id
        assert [kw["job"].id for name, kw in heard if name == "enqueued"] == [first.id]

    def test_the_reaper_finishes_a_lost_execution(self, heard: Heard) -> None:
        job = JobFactory(running_stale=True, type="test.flaky", attempts=2)
        lost = job.execution_id
        assert reaper.recover() == {"pending": 1}
        (finished,) = heard.finished(job.id)
        assert (finished["status"], finished["attempt"], finished["error_code"]) == (
            "pending",
            2,
            "LEASE_LOST",
        )
        assert finished["execution_id"] == lost and finished["duration"] is None
        assert str(lost) in finished["error"]

    @pytest.mark.slow
    def test_a_process_pool_worker_sends_them_from_the_worker(
        self, heard: Heard, worker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("DATABASE_URL", worker_env["DATABASE_URL"])  # for the child processes
        job = enqueue("test.flaky", {"succeed_on": 2})
        Worker(pool="process", until_settled=True, grace=5.0).run()
        assert heard.names(job.id) == ["enqueued", "started", "finished", "started", "finished"]
        assert [f["status"] for f in heard.finished(job.id)] == ["pending", "completed"]
        # The second start is due after the first one's backoff: its due time is the retry's.
        first, second = (kw for name, kw in heard.of(job.id) if name == "started")
        job.refresh_from_db()
        assert first["created_at"] == second["created_at"] == job.created_at
        assert first["available_at"] < second["available_at"]

    def test_a_receiver_that_raises_changes_nothing(
        self, heard: Heard, caplog: pytest.LogCaptureFixture
    ) -> None:
        def broken(sender: type, **kwargs: Any) -> None:
            raise RuntimeError("receiver bug, password=hunter2")

        def exits(sender: type, **kwargs: Any) -> None:
            raise SystemExit(1)

        for signal in SIGNALS.values():
            signal.connect(broken)
            signal.connect(exits)
        try:
            with caplog.at_level(logging.ERROR, logger="django_jobs.signals"):
                jobs = [enqueue("test.flaky", {"succeed_on": 2}), enqueue("test.permanent", {})]
                run_until_settled()
        finally:
            for signal in SIGNALS.values():
                signal.disconnect(broken)
                signal.disconnect(exits)
        statuses = [Job.objects.get(id=job.id).status for job in jobs]
        assert statuses == [JobStatus.COMPLETED, JobStatus.FAILED]  # as without them
        # The receivers connected before still heard everything, in order.
        assert heard.names(jobs[0].id) == ["enqueued", "started", "finished", "started", "finished"]
        errors = [r.getMessage() for r in caplog.records if "receiver raised" in r.getMessage()]
        # Each signal of each job reached both broken receivers, and each failure was logged.
        assert len(errors) == 2 * (1 + 2 + 2 + 1 + 1 + 1)
        assert not any("hunter2" in e for e in errors)
        assert any("RuntimeError" in e for e in errors) and any("SystemExit" in e for e in errors)


def test_a_signal_is_listened_to_only_with_a_receiver_for_jobs() -> None:
    def receiver(sender: type, **kwargs: Any) -> None:
        pass

    assert not listened(job_finished)  # the worker's question, per job: no receiver, no work
    job_finished.connect(receiver, sender=Order)
    try:
        assert not listened(job_finished)  # a receiver for another sender hears nothing
        job_finished.connect(receiver)
        assert listened(job_finished)
    finally:
        job_finished.disconnect(receiver, sender=Order)
        job_finished.disconnect(receiver)


class FromRunOneInATestCase(TestCase):
    def test_signals_wait_for_the_commit_and_come_in_order(self) -> None:
        heard = Heard()

        def receiver(sender: type, signal: Any, **kwargs: Any) -> None:
            name = next(n for n, s in SIGNALS.items() if s is signal)
            heard.append((name, kwargs))

        for signal in SIGNALS.values():
            signal.connect(receiver)
        try:
            with self.captureOnCommitCallbacks(execute=True) as callbacks:
                job = enqueue("test.permanent", {})
                ran = run_one()
                assert heard == []  # the test's transaction has not committed
            assert len(callbacks) == 3
        finally:
            for signal in SIGNALS.values():
                signal.disconnect(receiver)
        assert ran is not None
        assert heard.names(job.id) == ["enqueued", "started", "finished"]
        started = heard.of(job.id)[1][1]
        assert started["created_at"] == ran.created_at and started["available_at"] is not None
        (finished,) = heard.finished(job.id)
        assert (finished["status"], finished["attempt"], finished["error_code"]) == (
            "failed", 1, "ENTITY_NOT_FOUND",
        )  # fmt: skip
        assert finished["execution_id"] == ran.execution_id and isinstance(
            finished["execution_id"], uuid.UUID
        )
