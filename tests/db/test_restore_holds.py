"""Restore safety on the real database: what a worker's look records, the holds a restore's signs
open (the record tampered as a restore leaves it), what a worker then claims, and what operators
do from Python and from `manage.py jobsrestore`, bad input included."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models.functions import Now

from django_jobs import JobContext, job
from django_jobs.console import restore_holds
from django_jobs.decision import Happened
from django_jobs.maintenance.rescuer import recover
from django_jobs.models import DatabaseIdentity, Job, JobEvent, RestoreHold
from django_jobs.registry import registry
from django_jobs.restoring import Seen
from django_jobs.runtime.pool import Held
from django_jobs.runtime.restore_watch import RECHECK
from django_jobs.runtime.worker import Worker
from django_jobs.states import JobStatus
from django_jobs.transitions import ActionRefused, claim, restore, restore_release
from tests.db.inprocess import run_worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def record() -> DatabaseIdentity:
    return DatabaseIdentity.objects.get()


def tamper(**columns: int) -> None:
    """Leave the record as a restore would: what it said at the backup."""
    DatabaseIdentity.objects.update(**columns)


def _other_session() -> psycopg.Connection[tuple[object, ...]]:
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"]
    )


def test_a_look_skips_the_record_a_frozen_worker_holds_and_keeps_what_it_knew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker frozen inside its look keeps the record locked. The others' looks run on their
    heartbeat's thread: each gives up after LOOK_LOCK_WAIT instead of holding its leases up."""
    caplog.set_level(logging.INFO, logger="django_jobs.worker")
    watch = Worker(concurrency=1)._restore_watch
    assert watch.run_once() is not None and not watch.held  # the record exists, no hold
    with _other_session() as frozen:  # not autocommit: its transaction holds the lock
        frozen.execute("SELECT 1 FROM django_jobs_databaseidentity WHERE id = 1 FOR UPDATE")
        started = time.monotonic()
        assert restore.look(None, "w2") is None
        assert time.monotonic() - started < 5 * restore.LOOK_LOCK_WAIT + 1
        assert watch.run_once() is None and not watch.held  # the last answer stands
    assert any("restore look skipped" in r.getMessage() for r in caplog.records)
    with connection.cursor() as cursor:  # the bound was the look's transaction's alone
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"
    found = restore.look(None, "w2")
    assert found is not None and found.sign is None


def test_the_first_look_records_the_database_and_each_look_raises_the_generation() -> None:
    first = restore.look(None, "w1")
    assert (first.sign, first.opened, first.held) == (None, None, False)
    live = restore.live_identity()
    with connection.cursor() as cursor:
        cursor.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        assert live.database_oid == cursor.fetchone()[0]
    assert (record().database_oid, record().timeline, record().generation) == (
        live.database_oid,
        live.timeline,
        1,
    )
    second = restore.look(first.seen, "w1")
    other = restore.look(None, "w2")  # another worker, starting
    assert (second.sign, other.sign, record().generation) == (None, None, 3)
    assert restore.look(second.seen, "w1").sign is None  # behind the record: others looked since


def test_a_record_of_another_database_oid_opens_a_hold_once() -> None:
    restore.look(None, "w1")
    tamper(database_oid=1)
    found = restore.look(None, "w2")
    assert found.sign is not None and found.sign.kind == RestoreHold.Kind.RECREATED
    assert found.held and found.opened is not None
    hold = RestoreHold.objects.get()
    assert (hold.id, hold.kind, hold.opened_by, hold.released_at) == (found.opened, "recreated", "w2", None)
    assert "OID 1 " in hold.evidence
    assert record().database_oid == restore.live_identity().database_oid  # recorded as it is now
    tamper(database_oid=2)
    again = restore.look(None, "w3")  # a second sign while the hold is open adds no hold
    assert again.sign is not None and again.opened is None and again.held
    assert RestoreHold.objects.count() == 1


def test_opening_a_hold_moves_job_ids_past_those_a_lost_timeline_used() -> None:
    before = JobFactory().id
    restore.look(None, "w1")
    tamper(database_oid=1)
    assert restore.look(None, "w2").opened is not None
    detected = JobFactory().id
    assert detected > before + restore.ID_JUMP
    restore_holds.release(actor="ops", reason="checked")
    restore_holds.declare(actor="ops", reason="put back a copy")
    declared = JobFactory().id
    assert declared > detected + restore.ID_JUMP
    restore.look(None, "w3")  # a look that opens nothing moves nothing
    assert JobFactory().id == declared + 1


def test_a_record_behind_what_the_worker_saw_opens_a_hold() -> None:
    seen = restore.look(restore.look(None, "w1").seen, "w1").seen  # generation 2
    tamper(generation=1)
    found = restore.look(seen, "w1")
    assert found.sign is not None and found.sign.kind == RestoreHold.Kind.WENT_BACK and found.held
    assert restore.look(found.seen, "w1").sign is None  # it saw the restored lineage since


def test_a_new_timeline_opens_a_hold_for_a_starting_worker_not_for_one_that_ran_across() -> None:
    seen = restore.look(None, "w1").seen
    live_timeline = restore.live_identity().timeline
    tamper(timeline=live_timeline + 1)
    assert restore.look(seen, "w1").sign is None  # ran across the switch, found all it saw
    tamper(timeline=live_timeline + 1)
    found = restore.look(None, "w2")
    assert found.sign is not None and found.sign.kind == RestoreHold.Kind.NEW_TIMELINE


def test_a_worker_under_a_hold_runs_only_the_jobs_whose_effects_stay_in_the_database(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inside = JobFactory(type="test.noop")
    outside = JobFactory(type="test.unsafe", payload={})
    restore.look(None, "w1")
    tamper(database_oid=1)
    with caplog.at_level(logging.ERROR, logger="django_jobs.worker"):
        worker = run_worker()
    assert any("restore detected (recreated)" in r.getMessage() for r in caplog.records)
    assert "test.unsafe" in worker._restore_watch.outside and "test.noop" not in worker._restore_watch.outside
    assert Job.objects.get(id=inside.id).status == JobStatus.COMPLETED
    waiting = Job.objects.get(id=outside.id)
    assert (waiting.status, waiting.attempts) == (JobStatus.PENDING, 0)
    later = JobFactory(type="test.unsafe", payload={})  # enqueued under the hold: not suspect
    restore_holds.release(actor="ops", reason="checked the provider: nothing sent after the restore point")
    run_worker()
    # Its type cannot reconcile: parked for a human, who checks the provider and resolves it.
    assert Job.objects.get(id=outside.id).status == JobStatus.NEEDS_REVIEW
    assert Job.objects.get(id=later.id).status == JobStatus.COMPLETED


def test_run_one_under_a_hold_runs_only_the_jobs_whose_effects_stay_in_the_database() -> None:
    from django_jobs.testing import run_one

    outside = JobFactory(type="test.unsafe", payload={})
    inside = JobFactory(type="test.noop")
    restore_holds.declare(actor="ops", reason="restored last night's backup")

    ran = run_one()

    assert ran is not None and ran.id == inside.id
    assert run_one() is None  # the external job waits, as it does for a worker
    assert (Job.objects.get(id=outside.id).status, Job.objects.get(id=outside.id).attempts) == ("pending", 0)


def test_a_job_claimed_before_the_hold_opened_is_given_back_unstarted() -> None:
    outside = JobFactory(type="test.unsafe", payload={})
    worker = Worker(concurrency=1, burst=True)
    worker._restore_watch.run_once()  # no hold: its claims take every type
    claimed = claim(worker._producer.statement, 10)
    assert [c.id for c in claimed] == [outside.id]
    restore_holds.declare(actor="ops", reason="restored last night's backup")
    # Before the heartbeat's next look: the slot asks the database itself, before it starts it.
    finished = worker._pool._start(0, Held(claimed[0], worker._producer.lease_for(claimed[0])))
    assert finished.happened is Happened.NOT_STARTED
    assert worker._restore_watch.held  # and the worker's claims leave such jobs alone from now on


def test_a_declared_hold_stops_starts_within_the_recheck_interval() -> None:
    watch = Worker(concurrency=1, burst=True)._restore_watch
    watch.run_once()
    assert watch.may_start("test.unsafe")  # asked the database: no hold
    restore_holds.declare(actor="ops", reason="restored last night's backup")
    assert watch.may_start("test.unsafe")  # the answer stands for RECHECK seconds
    time.sleep(RECHECK)
    assert not watch.may_start("test.unsafe") and watch.held
    assert watch.may_start("test.noop")  # inside the database: never asks


def test_a_worker_that_has_not_looked_yet_holds_external_jobs() -> None:
    worker = Worker(concurrency=1, burst=True)
    watch = worker._restore_watch
    assert not watch.may_start("test.unsafe") and watch.may_start("test.noop")


def test_declare_and_release_are_recorded_with_who_and_why() -> None:
    hold_id = restore_holds.declare(actor="ops", reason="restored the orders table from a dump")
    hold = RestoreHold.objects.get(id=hold_id)
    assert (hold.kind, hold.opened_by, hold.evidence) == (
        "declared",
        "ops",
        "restored the orders table from a dump",
    )
    with pytest.raises(ActionRefused, match="open already"):
        restore_holds.declare(actor="ops", reason="again")
    with pytest.raises(ActionRefused, match="not the open one"):
        restore_holds.release(actor="ops", reason="done", hold_id=hold_id + 1)
    released = restore_holds.release(actor="lead", reason="providers checked", hold_id=hold_id)
    assert released.hold_id == hold_id
    hold.refresh_from_db()
    assert (hold.released_by, hold.release_reason) == ("lead", "providers checked") and hold.released_at
    assert hold.settled == {
        "to_reconcile": 0, "to_review": 0, "running": 0, "done": 0, "not_done": 0, "waiting": 0,
    }  # fmt: skip
    with pytest.raises(ActionRefused, match="no restore hold is open"):
        restore_holds.release(actor="lead", reason="twice")
    assert RestoreHold.objects.count() == 1


def open_hold_after(*jobs: Job) -> int:
    """Open a hold with ``jobs`` (and whatever else) enqueued before it."""
    Job.objects.filter(id__in=[j.id for j in jobs]).update(created_at=Now() - timedelta(minutes=5))
    return restore_holds.declare(actor="ops", reason="restored last night's backup")


def test_release_settles_the_jobs_the_hold_kept_and_nothing_else(tmp_path: Path) -> None:
    record = str(tmp_path / "provider")
    charge = JobFactory(type="test.provider_charge", payload={"record": record, "operation": "c1"})
    notice = JobFactory(type="test.provider_notice", payload={"record": record, "operation": "n1"})
    running = JobFactory(
        type="test.provider_notice", running=True, payload={"record": record, "operation": "n2"}
    )
    running_charge = JobFactory(
        type="test.marked_reconciled", running=True, on_lost="retry", payload={}
    )  # its marks vouch for nothing after a restore
    inside = JobFactory(type="test.noop")
    done = JobFactory(type="test.provider_charge", status=JobStatus.COMPLETED, payload={})
    hold_id = open_hold_after(charge, notice, running, running_charge, inside, done)
    later = JobFactory(type="test.provider_charge", payload={"record": record, "operation": "c2"})

    released = restore_holds.release(actor="lead", reason="providers checked at 09:00")

    assert released.settled == restore_release.Settled(to_reconcile=1, to_review=1, running=2)
    assert RestoreHold.objects.get(id=hold_id).settled == {
        "to_reconcile": 1, "to_review": 1, "running": 2, "done": 0, "not_done": 0, "waiting": 0,
    }  # fmt: skip
    rows = {j.id: j for j in Job.objects.all()}
    assert (rows[charge.id].status, rows[charge.id].last_error_code) == ("pending", "RESTORED")
    assert (rows[notice.id].status, rows[notice.id].last_error_code) == ("needs_review", "RESTORED")
    assert "restored from backup" in rows[notice.id].last_error
    assert (rows[running.id].status, rows[running.id].on_lost) == ("running", "needs_review")
    assert (rows[running_charge.id].on_lost, rows[running_charge.id].on_lost_in_call) == ("reconcile", None)
    for untouched in (inside, done, later):
        assert rows[untouched.id].last_error_code is None and rows[untouched.id].status == untouched.status
    events = {e.job_id: e for e in JobEvent.objects.all()}
    assert set(events) == {charge.id, notice.id, running.id, running_charge.id}
    parked = events[notice.id]
    assert (parked.kind, parked.from_status, parked.to_status, parked.actor) == (
        "needs_review", "pending", "needs_review", "lead",
    )  # fmt: skip
    assert parked.reason == f"restored from backup (restore hold {hold_id}): providers checked at 09:00"
    assert (
        events[charge.id].kind == "restore_released" and events[charge.id].details["restore_hold"] == hold_id
    )
    assert events[running.id].details["if_lost"] == "needs_review"


def test_after_release_only_what_the_provider_does_not_know_runs_again(tmp_path: Path) -> None:
    record = tmp_path / "provider"
    record.write_text("test.provider_charge:done-before\n")  # its effect happened after the backup
    happened = JobFactory(
        type="test.provider_charge", payload={"record": str(record), "operation": "done-before"}
    )
    not_yet = JobFactory(
        type="test.provider_charge", payload={"record": str(record), "operation": "never-ran"}
    )
    open_hold_after(happened, not_yet)
    restore_holds.release(actor="lead", reason="reconcile them")
    run_worker()
    assert Job.objects.get(id=happened.id).status == JobStatus.COMPLETED
    assert JobEvent.objects.filter(job_id=happened.id, kind="reconciled").exists()
    assert Job.objects.get(id=not_yet.id).status == JobStatus.COMPLETED
    assert not JobEvent.objects.filter(job_id=not_yet.id, kind="reconciled").exists()
    # Each effect once: the reconciled job was not called again, the other once.
    assert sorted(record.read_text().splitlines()) == [
        "test.provider_charge:done-before",
        "test.provider_charge:never-ran",
    ]


def test_a_reconcile_that_cannot_tell_parks_the_job_saying_it_was_restored(tmp_path: Path) -> None:
    unreadable = str(tmp_path)  # a directory: the provider cannot answer
    job = JobFactory(type="test.provider_charge", payload={"record": unreadable, "operation": "o"})
    open_hold_after(job)
    restore_holds.release(actor="lead", reason="reconcile them")
    run_worker()
    parked = Job.objects.get(id=job.id)
    assert (parked.status, parked.last_error_code) == (JobStatus.NEEDS_REVIEW, "RECONCILE_UNKNOWN")
    assert parked.last_error.startswith("restored from backup")


def test_a_released_job_lost_before_it_started_still_reconciles_first() -> None:
    job = JobFactory(type="test.provider_charge", payload={})
    open_hold_after(job)
    restore_holds.release(actor="lead", reason="reconcile them")
    # A worker claims it and dies before starting it: the doubt is not forgotten.
    Job.objects.filter(id=job.id).update(
        status="running",
        execution_id=uuid.uuid4(),
        worker_id="gone",
        heartbeat_at=Now() - timedelta(seconds=61),
        lease_expires_at=Now() - timedelta(seconds=1),
    )
    recover()
    assert Job.objects.get(id=job.id).last_error_code == "RESTORED"


def test_the_operator_answers_for_jobs_they_checked_with_the_provider() -> None:
    sent = JobFactory(type="test.provider_notice", payload={})
    unsent = JobFactory(type="test.provider_notice", payload={})
    unchecked = JobFactory(type="test.provider_notice", payload={})
    hold_id = open_hold_after(sent, unsent, unchecked)
    out = StringIO()
    call_command(
        "jobsrestore", "release", "--reason", "provider dashboard checked", "--done", str(sent.id),
        "--not-done", str(unsent.id), "--actor", "ops", stdout=out,
    )  # fmt: skip
    assert "as you answered: 1 completed without running, 1 run again" in out.getvalue()
    rows = {j.id: j for j in Job.objects.all()}
    assert (rows[sent.id].status, rows[sent.id].last_error_code) == ("completed", None)
    assert rows[sent.id].completed_at is not None and rows[sent.id].finished_at is not None
    assert (rows[unsent.id].status, rows[unsent.id].last_error_code) == ("pending", None)
    assert rows[unchecked.id].status == "needs_review"
    parked, resolved = JobEvent.objects.filter(job_id=sent.id).order_by("id")
    assert (parked.kind, parked.from_status, parked.to_status) == ("needs_review", "pending", "needs_review")
    assert (resolved.kind, resolved.from_status, resolved.to_status, resolved.actor) == (
        "resolved", "needs_review", "completed", "ops",
    )  # fmt: skip
    assert resolved.details["answer"] == "done" and "provider dashboard checked" in resolved.reason
    assert RestoreHold.objects.get(id=hold_id).settled == {
        "to_reconcile": 0, "to_review": 1, "running": 0, "done": 1, "not_done": 1, "waiting": 0,
    }  # fmt: skip


def test_an_answer_for_a_job_the_hold_does_not_keep_refuses_the_whole_release() -> None:
    held = JobFactory(type="test.provider_notice", payload={})
    inside = JobFactory(type="test.noop")
    running = JobFactory(type="test.provider_notice", running=True, payload={})
    hold_id = open_hold_after(held, inside, running)
    later = JobFactory(type="test.provider_notice", payload={})
    cases = [
        ([str(held.id), "999999999"], "no job 999999999"),
        ([str(inside.id)], f"job {inside.id} is not held: its type test.noop acts inside the database"),
        ([str(running.id)], f"job {running.id} is running: only a job not started"),
        ([str(later.id)], f"job {later.id} is not held: it was enqueued after restore hold {hold_id} opened"),
    ]
    for ids, message in cases:
        with pytest.raises(CommandError, match=message):
            call_command("jobsrestore", "release", "--reason", "checked", "--done", *ids, stdout=StringIO())
    with pytest.raises(CommandError, match=f"job {held.id} is answered both done and not done"):
        call_command(
            "jobsrestore", "release", "--reason", "checked", "--done", str(held.id),
            "--not-done", str(held.id), stdout=StringIO(),
        )  # fmt: skip
    # Nothing half done: the hold is open, no job moved, no event written.
    assert RestoreHold.objects.get(id=hold_id).released_at is None
    assert Job.objects.get(id=held.id).status == JobStatus.PENDING
    assert not JobEvent.objects.exists()


@pytest.mark.parametrize("value", ["0", "-3", "x", "9223372036854775808", "1.5"])
def test_a_job_id_that_is_not_one_is_refused_by_the_parser(value: str) -> None:
    RestoreHold.objects.create(kind="declared", evidence="e", opened_by="w")
    with pytest.raises(CommandError, match="--done"):
        call_command("jobsrestore", "release", "--reason", "checked", "--done", value, stdout=StringIO())
    assert RestoreHold.objects.get().released_at is None


@pytest.mark.parametrize(
    ("actor", "reason", "message"),
    [
        ("ops", "", "reason must be a non-empty string"),
        ("ops", "   ", "reason must be a non-empty string"),
        ("", "why", "actor must be a non-empty string"),
        ("ops", "a\x00b", "NUL"),
        ("ops", "x" * 2001, "longer than 2000"),
        ("o" * 151, "why", "longer than 150"),
        ("ops", None, "reason must be a non-empty string"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(actor: str, reason: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        restore_holds.declare(actor=actor, reason=reason)
    assert not RestoreHold.objects.exists()
    RestoreHold.objects.create(kind="declared", evidence="e", opened_by="w")
    with pytest.raises(ValueError, match=message):
        restore_holds.release(actor=actor, reason=reason)
    assert RestoreHold.objects.get().released_at is None


def test_jobsrestore_command_reports_declares_and_releases() -> None:
    JobFactory(type="test.unsafe", payload={})
    out = StringIO()
    call_command("jobsrestore", stdout=out)
    text = out.getvalue()
    assert "recorded: nothing yet" in text and "restore hold: none open" in text
    assert "test.unsafe: 1 pending" in text
    call_command(
        "jobsrestore", "declare", "--reason", "restored from backup", "--actor", "ops", stdout=StringIO()
    )
    restore.look(None, "w1")
    out = StringIO()
    call_command("jobsrestore", "status", stdout=out)
    hold = RestoreHold.objects.get()
    assert f"restore hold {hold.id}: open since" in out.getvalue() and "generation 1" in out.getvalue()
    reconciling = (
        "test.marked_reconciled, test.model_reconciled, test.provider_charge, test.reconciled_charge"
    )
    assert f"with reconcile ({reconciling})" in out.getvalue()
    assert f"--hold {hold.id} --reason '...' [--done JOB ...] [--not-done JOB ...]" in out.getvalue()
    out = StringIO()
    call_command("jobsrestore", "release", "--hold", str(hold.id), "--reason", "checked", stdout=out)
    assert f"restore hold {hold.id} released" in out.getvalue()


def test_declaring_while_workers_run_says_what_they_do() -> None:
    JobFactory(type="test.unsafe", running=True)
    restore.look(None, "w1")
    worker = Worker(concurrency=1, burst=True)
    worker._presence.report_alive()
    out = StringIO()
    call_command("jobsrestore", "declare", "--reason", "restored from backup", "--actor", "ops", stdout=out)
    assert "1 worker(s) running: they start no job of an external type from now on" in out.getvalue()
    assert "1 job(s) of those types are running now and go on" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["release", "--reason", "x"], "no restore hold is open"),
        (["release", "--reason", "", "--hold", "1"], "reason must be a non-empty string"),
        (["declare", "--reason", " "], "reason must be a non-empty string"),
    ],
)
def test_jobsrestore_command_errors_are_clear(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("jobsrestore", *args, stdout=StringIO())
    assert not RestoreHold.objects.exists()


def test_checkjobs_names_an_open_hold_as_critical() -> None:
    restore_holds.declare(actor="ops", reason="restored from backup")
    out = StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("checkjobs", stdout=out)
    assert exited.value.code == 1
    assert "CRITICAL: restore hold" in out.getvalue() and "restored from backup" in out.getvalue()


def test_seen_is_what_the_worker_remembers() -> None:
    found = restore.look(None, "w1")
    assert isinstance(found.seen, Seen) and found.seen.generation == record().generation


@pytest.fixture
def silent_type() -> Iterator[str]:
    """A type that says nothing of where its effects are (it might call a provider)."""

    @job("test.says_nothing")
    def says_nothing(ctx: JobContext, payload: dict[str, Any]) -> None:
        pass

    yield "test.says_nothing"
    registry.unregister("test.says_nothing")


def test_a_type_that_does_not_say_where_its_effects_are_is_held_as_if_external(silent_type: str) -> None:
    silent = JobFactory(type=silent_type, payload={})
    inside = JobFactory(type="test.noop")  # declared external=False
    hold_id = open_hold_after(silent, inside)
    assert silent_type in restore_holds.outside_types()
    out = StringIO()
    call_command("jobsrestore", stdout=out)
    assert silent_type in out.getvalue() and f"{silent_type}: 1 pending" in out.getvalue()
    worker = run_worker()
    assert silent_type in worker._restore_watch.outside
    assert Job.objects.get(id=inside.id).status == JobStatus.COMPLETED
    held = Job.objects.get(id=silent.id)
    assert (held.status, held.attempts) == (JobStatus.PENDING, 0)
    restore_holds.release(actor="ops", reason="checked: nothing sent after the restore point")
    # It cannot reconcile: parked for a person, never run blind.
    assert Job.objects.get(id=silent.id).status == JobStatus.NEEDS_REVIEW
    assert RestoreHold.objects.get(id=hold_id).settled["to_review"] == 1
