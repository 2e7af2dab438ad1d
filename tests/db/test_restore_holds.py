"""Restore safety on the real database: what a worker's look records, the holds a restore's signs
open (the record tampered as a restore leaves it), what a worker then claims, and what operators
do from Python and from `manage.py jobsrestore`, bad input included."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from django_jobs.console import restore_holds
from django_jobs.decision import Happened
from django_jobs.models import DatabaseIdentity, Job, RestoreHold
from django_jobs.restoring import Seen
from django_jobs.runtime.worker import Worker
from django_jobs.states import JobStatus
from django_jobs.transitions import ActionRefused, claim, restore
from tests.db.inprocess import run_worker
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def record() -> DatabaseIdentity:
    return DatabaseIdentity.objects.get()


def tamper(**columns: int) -> None:
    """Leave the record as a restore would: what it said at the backup."""
    DatabaseIdentity.objects.update(**columns)


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
    restore_holds.release(actor="ops", reason="checked the provider: nothing sent after the restore point")
    run_worker()
    assert Job.objects.get(id=outside.id).status == JobStatus.COMPLETED


def test_a_job_claimed_before_the_hold_opened_is_given_back_unstarted() -> None:
    outside = JobFactory(type="test.unsafe", payload={})
    worker = Worker(concurrency=1, burst=True)
    worker._restore_watch.run_once()  # no hold: its claims take every type
    claimed = claim(worker._producer.statement, 10)
    assert [c.id for c in claimed] == [outside.id]
    restore_holds.declare(actor="ops", reason="restored last night's backup")
    worker._restore_watch.run_once()  # the heartbeat's next look
    finished = worker._execute(claimed[0], worker._producer.lease_for(claimed[0]))
    assert finished.happened is Happened.NOT_STARTED


def test_a_worker_that_has_not_looked_yet_holds_external_jobs() -> None:
    worker = Worker(concurrency=1, burst=True)
    assert worker._restore_watch.holds("test.unsafe") and not worker._restore_watch.holds("test.noop")


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
    assert restore_holds.release(actor="lead", reason="providers checked", hold_id=hold_id) == hold_id
    hold.refresh_from_db()
    assert (hold.released_by, hold.release_reason) == ("lead", "providers checked") and hold.released_at
    with pytest.raises(ActionRefused, match="no restore hold is open"):
        restore_holds.release(actor="lead", reason="twice")
    assert RestoreHold.objects.count() == 1


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
    out = StringIO()
    call_command("jobsrestore", "release", "--hold", str(hold.id), "--reason", "checked", stdout=out)
    assert f"restore hold {hold.id} released" in out.getvalue()


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
