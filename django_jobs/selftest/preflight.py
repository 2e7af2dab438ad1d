"""The self-test's refusals: each is checked before anything is written, and says what to do.

It refuses to run

- in a queue the project's ``QUEUES`` does not declare (``enqueue()`` would refuse its jobs,
  and a queue should not be declared behind the operator's back);
- as a database role that may not write the job tables it writes (it names each privilege
  missing);
- in a paused queue (its jobs would never start);
- in a queue holding any job that is not the self-test's, in any status: it would then share
  its queue, its workers and its clean-up with work that is not its own;
- while another run holds the queue, or an earlier run left its jobs there (kept with
  ``--keep``, or interrupted): ``--clean`` removes them.
"""

from __future__ import annotations

from django_jobs import names
from django_jobs.conf import jobs_settings
from django_jobs.errors import undeclared_queue
from django_jobs.models import Job, JobEvent, LiveWorker, ProcessedEffect, Queue
from django_jobs.reads import privileges
from django_jobs.selftest.jobs import RUN, TYPES

#: A count of other jobs stops here: "1,000+" says enough.
COUNT_CAP = 1000


class Refused(Exception):
    """The self-test will not run here, and has written nothing; the message says why and
    what to do."""


def needed_privileges() -> list[tuple[str, str]]:
    """What the self-test does to each table: enqueue, run and remove its jobs (their events),
    record and remove its effect keys; its workers report themselves alive."""
    job, event = Job._meta.db_table, JobEvent._meta.db_table
    effect, worker = ProcessedEffect._meta.db_table, LiveWorker._meta.db_table
    return [
        *((job, p) for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
        *((event, p) for p in ("SELECT", "INSERT", "DELETE")),
        *((effect, p) for p in ("SELECT", "INSERT", "DELETE")),
        *((worker, p) for p in ("SELECT", "INSERT", "UPDATE", "DELETE")),
        (Queue._meta.db_table, "SELECT"),
    ]


def check(queue: str) -> None:
    """Raise :class:`Refused` unless the self-test may run in ``queue`` now."""
    if not names.QUEUE_RE.match(queue):
        raise Refused(f"{queue!r} is not a queue name: 1-100 letters, digits and _ . : -")
    declared = jobs_settings.QUEUES
    if declared is not None and queue not in declared:
        raise Refused(
            f"{undeclared_queue(queue, declared)}: the self-test runs its jobs in a queue of its own. "
            f"Declare {queue!r} in DJANGO_JOBS['QUEUES'] (no job of yours needs to use it), or name "
            "an empty declared queue with --queue."
        )
    _may_write()
    paused = Queue.objects.filter(name=queue, paused_at__isnull=False).first()
    if paused is not None:
        raise Refused(
            f"queue {queue!r} is paused (by {paused.paused_by}: {paused.reason}): the self-test's "
            "jobs would never start. Resume it (manage.py jobsqueue resume) or name another with --queue."
        )
    _holds_nothing_else(queue)


def _may_write() -> None:
    missing = privileges.missing(needed_privileges())
    if not missing:
        return
    listed = ", ".join(f"{privilege} on {table}" for table, privilege in missing)
    raise Refused(
        f"the database role {privileges.role()!r} lacks {listed}: the self-test enqueues, runs and "
        "removes jobs of its own. Run it as the role your workers use (it needs what they need)."
    )


def _holds_nothing_else(queue: str) -> None:
    others = Job.objects.filter(queue=queue).exclude(type__in=TYPES)
    sample = others.values("id", "type", "status").first()
    if sample is not None:
        count = len(others.values_list("id", flat=True)[:COUNT_CAP])
        counted = f"{count:,}+" if count == COUNT_CAP else f"{count:,}"
        raise Refused(
            f"queue {queue!r} holds {counted} job(s) that are not the self-test's (job {sample['id']}, "
            f"{sample['type']}, {sample['status']}, among them): the self-test runs only in a queue of "
            "its own, and touches nothing else. Name an unused queue with --queue."
        )
    marker = Job.objects.filter(queue=queue, type=RUN).order_by("id").first()
    if marker is not None:
        raise Refused(another_run(queue, marker))
    left = Job.objects.filter(queue=queue, type__in=TYPES).values_list("payload", flat=True)
    runs = sorted({str(payload.get("run")) for payload in left[:COUNT_CAP] if isinstance(payload, dict)})
    if runs:
        raise Refused(
            f"queue {queue!r} holds jobs an earlier self-test left (run {', '.join(runs)}: kept with "
            f"--keep, or interrupted). Remove them first: manage.py jobsselftest --clean --queue {queue}"
        )


def another_run(queue: str, marker: Job) -> str:
    """Why a run must wait: another run holds ``queue`` (its marker job says which, where)."""
    payload = marker.payload if isinstance(marker.payload, dict) else {}
    since = f"{marker.created_at:%Y-%m-%d %H:%M:%S %Z}" if marker.created_at else "?"
    return (
        f"another self-test holds queue {queue!r}: run {payload.get('run')}, pid {payload.get('pid')} "
        f"on host {payload.get('host')}, since {since} (job {marker.id}). If it is no longer running "
        f"(it was killed), remove what it left: manage.py jobsselftest --clean --queue {queue}"
    )
