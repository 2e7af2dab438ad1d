"""The steps of a project whose jobs live on a database of their own, run as real processes.

``python -m tests.process.jobs_database_project STEP`` runs one step in a process of its own
(with ``DATABASE_URL`` and ``JOBS_DATABASE_URL`` naming the two databases) and prints what it
saw as one line of JSON. Every statement on ``default`` that names one of django_jobs' tables is
recorded and reported: there the tables do not exist, so such a statement would fail, and a
recorded one shows it even where an error was swallowed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

import psycopg  # noqa: E402
from django.contrib.admin.models import LogEntry  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.db.models.functions import Now  # noqa: E402
from django.test import Client  # noqa: E402

from django_jobs import enqueue  # noqa: E402
from django_jobs.models import Job, LiveWorker, PendingLogEntry, QueueEvent  # noqa: E402

JOBS = "jobs"
HELD_QUEUE = "held"
#: The admin's URLs for the console's actions.
ACT = "/admin/django_jobs/job/act/{}/"
QUEUE = "/admin/django_jobs/job/queue/{}/?queue=" + HELD_QUEUE
SCHEDULE = "/admin/django_jobs/scheduletick/schedule/{}/?schedule=test-tick"
#: The console's pages that only read.
PAGES = (
    "/admin/django_jobs/job/", "/admin/django_jobs/job/dashboard/", "/admin/django_jobs/scheduletick/",
    "/admin/django_jobs/job/?status=failed&queue=default", "/jobs/metrics",
)  # fmt: skip

strays: list[str] = []


def _spy(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    if "django_jobs_" in sql:
        strays.append(sql[:200])
    return execute(sql, params, many, context)


def _operator() -> Client:
    client = Client()
    client.force_login(User.objects.get(username="ops"))
    return client


def _post(client: Client, url: str, **data: str) -> int:
    return int(client.post(url, data).status_code)


def prepare() -> dict[str, Any]:
    """An operator, jobs enqueued in the jobs database's transaction, a task, a paused queue
    and a worker that went silent two days ago."""
    User.objects.create_superuser("ops", "ops@example.com", "not-a-secret")
    with transaction.atomic(using=JOBS):  # the documented caveat: atomic with the jobs database only
        ok = enqueue("test.noop", {})
        bad = enqueue("test.permanent", {})
        held = enqueue("test.noop", {}, queue=HELD_QUEUE)
    from testproject.testjobs.tasks import add

    task = add.enqueue(2, 3)
    paused = _post(_operator(), QUEUE.format("pause"), queue=HELD_QUEUE, reason="provider outage")
    LiveWorker.objects.create(
        worker_id="gone@host", hostname="host", pid=1, queues="", concurrency=1,
        last_seen_at=Now() - dt.timedelta(days=2),
    )  # fmt: skip
    return {"ok": ok.id, "bad": bad.id, "held": held.id, "task": str(task.id), "paused": paused}


def console(ids: dict[str, Any]) -> dict[str, Any]:
    """Read every page, act on the jobs, the queue and the schedule; then act once while the
    admin's log is locked, so that its entry cannot be written when the action commits."""
    client = _operator()
    pages = {url: client.get(url).status_code for url in PAGES}
    pages["job"] = client.get(f"/admin/django_jobs/job/{ids['bad']}/change/").status_code
    acted = {
        "retry": _post(client, ACT.format("retry"), ids=str(ids["bad"]), reason="account restored"),
        "cancel": _post(client, ACT.format("cancel"), ids=str(ids["held"]), reason="not wanted"),
        "resume": _post(client, QUEUE.format("resume"), queue=HELD_QUEUE, reason="provider back"),
        "run": _post(client, SCHEDULE.format("run"), schedule="test-tick", reason="month end"),
    }
    logged = LogEntry.objects.count()
    acted["pause_unlogged"] = _act_while_log_is_locked(client)
    explained, checked = io.StringIO(), io.StringIO()
    call_command("explainjob", str(ids["bad"]), stdout=explained)
    with contextlib.suppress(SystemExit):  # critical findings end in status 1; the output is the report
        call_command("checkjobs", stdout=checked)
    from django_jobs.tasks_framework.backend import JobsBackend
    from testproject.testjobs.tasks import add

    result = add.get_backend().get_result(ids["task"])
    assert isinstance(add.get_backend(), JobsBackend)
    return {
        "pages": pages, "acted": acted, "logged": logged, "owed": PendingLogEntry.objects.count(),
        "queue_events": QueueEvent.objects.count(),
        "explained": explained.getvalue(), "checked": checked.getvalue(),
        "task": [str(result.status), result.return_value],
    }  # fmt: skip


def _act_while_log_is_locked(client: Client) -> int:
    """Pause the queue while another session holds the admin's log table: the action and its
    event commit on the jobs database; the log entry's write times out."""
    settings = connections["default"].settings_dict
    url = f"postgresql://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"
    with psycopg.connect(url) as holder:
        holder.execute("LOCK TABLE django_admin_log IN ACCESS EXCLUSIVE MODE")
        with connections["default"].cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        status = _post(client, QUEUE.format("pause"), queue=HELD_QUEUE, reason="second outage")
        with connections["default"].cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        holder.rollback()
    return status


def verify(ids: dict[str, Any]) -> dict[str, Any]:
    """What the workers, the console and the reaper left."""
    jobs = {name: Job.objects.get(id=ids[name]) for name in ("ok", "bad", "held")}
    entries = list(LogEntry.objects.order_by("id"))
    second = QueueEvent.objects.get(reason="second outage")
    return {
        "status": {name: job.status for name, job in jobs.items()},
        "bad_events": list(jobs["bad"].events.order_by("id").values_list("kind", "actor")),
        "log": [entry.get_change_message() for entry in entries],
        # The late entry keeps the time of its action (the jobs database's clock), not of its
        # writing, which came a worker run later.
        "late_entry_after_event": (entries[-1].action_time - second.created_at).total_seconds(),
        "owed": PendingLogEntry.objects.count(),
        "silent_worker_kept": LiveWorker.objects.filter(worker_id="gone@host").exists(),
        "ticked_jobs": Job.objects.filter(type="test.ticked").count(),
    }


def main() -> None:
    step = sys.argv[1]
    ids = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    with connections["default"].execute_wrapper(_spy):
        seen = prepare() if step == "prepare" else console(ids) if step == "console" else verify(ids)
    print(json.dumps({**seen, "strays": strays}, default=str))


if __name__ == "__main__":
    main()
