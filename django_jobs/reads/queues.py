"""The per-queue figures: how many jobs wait (for a workflow's earlier jobs, or to be due), are
due, run, are stale, failed or wait for a person, and who paused the queue. The dashboard's
queue table and the metrics view's gauges read the same numbers, from here.

Each figure costs the same on a table of any size. The waiting, pending, due, failed and
parked jobs are counted through django_jobs_queue_counts, each count a range of it stopped at
:data:`COUNT_CAP`: a backlog can legitimately be millions of jobs, and failed jobs are kept
forever by default, but "10,000+" says all a person or an alert needs, where counting them all
would read every one. The running jobs are counted exactly: they are few (the workers' slots,
and the stale ones until the reaper takes them back). ``queue_depth`` (``django_jobs.queue_depth``)
sums them for Python, or, asked for ``exact`` figures, counts every row.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django_jobs.reads.bounded import bounded_cursor
from django_jobs.registry import registry

#: Each count of a queue's waiting, pending, due, failed or parked jobs stops here: a count at
#: the cap means at least this many.
COUNT_CAP = 10_000


@dataclass
class QueueRow:
    queue: str
    #: Workflow steps waiting for the jobs before them.
    waiting: int = 0
    pending: int = 0
    due: int = 0
    running: int = 0
    stale: int = 0
    failed: int = 0
    needs_review: int = 0
    oldest_due_seconds: float | None = None
    #: The cap the waiting, pending, due, failed and needs-review counts stop at.
    cap: int = COUNT_CAP
    #: Set while the queue is paused, with who paused it and why.
    paused_at: dt.datetime | None = None
    paused_by: str | None = None
    pause_reason: str | None = None


#: The queues holding waiting, pending, failed or parked jobs, and each one's counts of them, up
#: to a cap, with the age of its oldest due job: django_jobs_queue_counts (queue, status,
#: available_at) of those statuses. The queues come from a loose scan of it (a probe per queue);
#: each count is a range of it stopped by its LIMIT, the oldest due job the first entry of one.
#: The status of every probe is a constant, so that the planner sees the index's predicate hold.
COUNTS = """
WITH RECURSIVE queues(queue) AS (
    SELECT min(queue) FROM django_jobs_job WHERE status IN ('failed', 'needs_review', 'pending', 'waiting')
    UNION ALL
    SELECT (SELECT min(queue) FROM django_jobs_job
            WHERE status IN ('failed', 'needs_review', 'pending', 'waiting') AND queue > q.queue)
    FROM queues AS q WHERE q.queue IS NOT NULL
)
SELECT q.queue,
    (SELECT count(*) FROM (SELECT FROM django_jobs_job
                           WHERE queue = q.queue AND status = 'waiting' LIMIT %(cap)s) AS c),
    (SELECT count(*) FROM (SELECT FROM django_jobs_job
                           WHERE queue = q.queue AND status = 'pending' LIMIT %(cap)s) AS c),
    (SELECT count(*) FROM (SELECT FROM django_jobs_job
                           WHERE queue = q.queue AND status = 'pending' AND available_at <= now()
                           LIMIT %(cap)s) AS c),
    (SELECT EXTRACT(EPOCH FROM now() - min(available_at)) FROM django_jobs_job
     WHERE queue = q.queue AND status = 'pending' AND available_at <= now()),
    (SELECT count(*) FROM (SELECT FROM django_jobs_job
                           WHERE queue = q.queue AND status = 'failed' LIMIT %(cap)s) AS c),
    (SELECT count(*) FROM (SELECT FROM django_jobs_job
                           WHERE queue = q.queue AND status = 'needs_review' LIMIT %(cap)s) AS c)
FROM queues AS q WHERE q.queue IS NOT NULL
"""
#: Running and expired leases, per queue: running rows only, through django_jobs_running or
#: django_jobs_status.
RUNNING = """
SELECT queue, count(*), count(*) FILTER (WHERE lease_expires_at < now())
FROM django_jobs_job WHERE status = 'running' GROUP BY queue
"""
#: The paused queues, with who and why: the queue table (a row per queue ever paused).
PAUSED = "SELECT name, paused_at, paused_by, reason FROM django_jobs_queue_state WHERE paused_at IS NOT NULL"


def queue_rows() -> list[QueueRow]:
    """The per-queue figures, by queue name: every queue that holds jobs in one of the counted
    states, every queue a registered job type names and every paused one (so that an idle queue
    can be paused ahead of time, and a paused one is seen). The counts of each stop at
    :data:`COUNT_CAP` (read when called)."""
    cap = COUNT_CAP
    queues: dict[str, QueueRow] = {}
    with bounded_cursor() as cursor:
        cursor.execute(COUNTS, {"cap": cap})
        for name, waiting, pending, due, oldest, failed, needs_review in cursor.fetchall():
            queues[name] = QueueRow(
                name,
                waiting=waiting,
                pending=pending,
                due=due,
                oldest_due_seconds=_float(oldest),
                failed=failed,
                needs_review=needs_review,
                cap=cap,
            )
        cursor.execute(RUNNING)
        for name, running, stale in cursor.fetchall():
            row = queues.setdefault(name, QueueRow(name, cap=cap))
            row.running, row.stale = running, stale
        for job_type in registry.all():
            queues.setdefault(job_type.default_queue, QueueRow(job_type.default_queue, cap=cap))
        cursor.execute(PAUSED)
        for name, paused_at, paused_by, reason in cursor.fetchall():
            row = queues.setdefault(name, QueueRow(name, cap=cap))
            row.paused_at, row.paused_by, row.pause_reason = paused_at, paused_by, reason
    return sorted(queues.values(), key=lambda q: q.queue)


@dataclass(frozen=True)
class QueueDepth:
    """How many jobs a queue holds (or all queues together), by where they are.

    With ``capped`` true, some count stopped at :data:`COUNT_CAP` (per queue): read those
    counts as "at least"; ask for ``exact=True`` to count every row.
    """

    #: The queue counted, or None for every queue.
    queue: str | None
    #: Workflow steps waiting for the jobs before them.
    waiting: int
    #: Pending jobs: ``due`` ones, and ``scheduled`` ones (retries and ``run_at``/``delay``).
    pending: int
    #: Pending jobs whose time has come: what the workers should be taking now.
    due: int
    running: int
    #: Running jobs whose lease has expired (their worker is gone; the reaper will take them back).
    stale: int
    failed: int
    needs_review: int
    #: Seconds the longest-due pending job has waited since it was due, or None when none is due.
    oldest_due_seconds: float | None
    capped: bool = False

    @property
    def scheduled(self) -> int:
        """Pending jobs not due yet."""
        return self.pending - self.due

    @property
    def active(self) -> int:
        """The jobs not ended yet: waiting, pending and running."""
        return self.waiting + self.pending + self.running


#: Every row of the counted states, for an exact depth: reads each of them (through
#: django_jobs_queue_counts and the running rows' index), where the capped counts stop early.
EXACT = """
SELECT count(*) FILTER (WHERE status = 'waiting'), count(*) FILTER (WHERE status = 'pending'),
    count(*) FILTER (WHERE status = 'pending' AND available_at <= now()),
    count(*) FILTER (WHERE status = 'running'),
    count(*) FILTER (WHERE status = 'running' AND lease_expires_at < now()),
    count(*) FILTER (WHERE status = 'failed'), count(*) FILTER (WHERE status = 'needs_review'),
    EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE status = 'pending' AND available_at <= now()))
FROM django_jobs_job
WHERE status IN ('waiting', 'pending', 'running', 'failed', 'needs_review') {queue}
"""


def queue_depth(queue: str | None = None, *, exact: bool = False) -> QueueDepth:
    """How many jobs ``queue`` holds (every queue's, summed, by default), by where they are: a
    backlog to alert on, a benchmark's "drained yet?".

    By default the figures are the dashboard's (its queue table reads the same counts): each
    count of a queue stops at :data:`COUNT_CAP` (``capped`` says whether one did), so the call
    costs the same on a table of any size. ``exact=True`` counts every row instead: its cost
    grows with the jobs counted (the failed ones are kept forever by default).
    """
    if exact:
        return _exact_depth(queue)
    rows = [row for row in queue_rows() if queue is None or row.queue == queue]
    counted = ("waiting", "pending", "due", "failed", "needs_review")
    sums = {name: sum(getattr(row, name) for row in rows) for name in (*counted, "running", "stale")}
    oldest = [row.oldest_due_seconds for row in rows if row.oldest_due_seconds is not None]
    capped = any(getattr(row, name) >= row.cap for row in rows for name in counted)
    return QueueDepth(queue, **sums, oldest_due_seconds=max(oldest, default=None), capped=capped)


def _exact_depth(queue: str | None) -> QueueDepth:
    with bounded_cursor() as cursor:
        if queue is None:
            cursor.execute(EXACT.format(queue=""))
        else:
            cursor.execute(EXACT.format(queue="AND queue = %s"), [queue])
        waiting, pending, due, running, stale, failed, needs_review, oldest = cursor.fetchone()
    return QueueDepth(queue, waiting, pending, due, running, stale, failed, needs_review, _float(oldest))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
