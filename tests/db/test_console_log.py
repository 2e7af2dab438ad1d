"""The admin log entries a console action owes (``PendingLogEntry``) are written once, with the
time of the action, by the reaper's pass; and a failing housekeeping step of that pass is
logged without keeping the others from running."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection

from django_jobs.console import audit as consolelog
from django_jobs.maintenance import reaper
from django_jobs.models import Job, LiveWorker, PendingLogEntry
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

#: A trigger that makes the job database refuse to forget any live worker.
REFUSE_WORKER_DELETES = """
CREATE FUNCTION test_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'deleting live workers is refused here'; END $$;
CREATE TRIGGER test_refuse_delete BEFORE DELETE ON django_jobs_liveworker
    FOR EACH ROW EXECUTE FUNCTION test_refuse_delete();
"""
ALLOW_WORKER_DELETES = """
DROP TRIGGER IF EXISTS test_refuse_delete ON django_jobs_liveworker;
DROP FUNCTION IF EXISTS test_refuse_delete();
"""


def owe(user: User, job: Job, message: str) -> PendingLogEntry:
    return PendingLogEntry.objects.create(
        user_id=str(user.pk), content_type_id=ContentType.objects.get_for_model(Job).pk,
        object_id=str(job.pk), object_repr=str(job), action_flag=CHANGE, change_message=message,
    )  # fmt: skip


@pytest.fixture
def refused_worker_deletes() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(REFUSE_WORKER_DELETES)
    yield
    with connection.cursor() as cursor:
        cursor.execute(ALLOW_WORKER_DELETES)


def test_owed_entries_are_written_once_with_the_time_of_their_action() -> None:
    ops = User.objects.create_user("ops")
    job = JobFactory()
    retried, cancelled = owe(ops, job, "retried (was failed): fixed"), owe(ops, job, "cancelled: not wanted")
    # The second was written before a crash kept its pending row from being deleted.
    LogEntry.objects.create(
        action_time=cancelled.action_time, user=ops, content_type_id=cancelled.content_type_id,
        object_id=cancelled.object_id, object_repr="x", action_flag=CHANGE,
        change_message=cancelled.change_message,
    )  # fmt: skip

    assert consolelog.deliver_pending() == 2

    entries = list(LogEntry.objects.order_by("id").values_list("change_message", "action_time", "user_id"))
    assert entries == [
        ("cancelled: not wanted", cancelled.action_time, ops.pk),
        ("retried (was failed): fixed", retried.action_time, ops.pk),
    ]
    assert not PendingLogEntry.objects.exists()
    assert consolelog.deliver_pending() == 0


def test_a_failing_reaper_step_is_logged_and_the_later_steps_still_run(
    refused_worker_deletes: None, caplog: pytest.LogCaptureFixture
) -> None:
    LiveWorker.objects.create(
        worker_id="gone@host", hostname="host", pid=1, queues="", concurrency=1,
        last_seen_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
    )  # fmt: skip
    owe(User.objects.create_user("ops"), JobFactory(), "paused: outage")

    result = reaper.run_once()

    assert result.failed_steps == ["forget_silent_workers"]
    assert result.as_dict()["failed_steps"] == ["forget_silent_workers"]
    assert "reaper step forget_silent_workers failed" in caplog.text
    assert "deleting live workers is refused here" in caplog.text
    # The steps after it ran: the owed log entry was written.
    assert LogEntry.objects.get().change_message == "paused: outage"
    assert not PendingLogEntry.objects.exists() and LiveWorker.objects.filter(worker_id="gone@host").exists()
