"""What the on-call engineer sees first: the figures of the dashboard, each one query served by
an index, and the SVG charts drawn from them (no JavaScript, no CDN)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from django_jobs.conf import jobs_settings
from django_jobs.models import LiveWorker
from django_jobs.registry import registry

#: Counting beyond this many rows says "N+" instead: the dashboard stays fast on any table.
COUNT_CAP = 100_000


@dataclass
class QueueRow:
    queue: str
    pending: int = 0
    due: int = 0
    running: int = 0
    stale: int = 0
    failed: int = 0
    needs_review: int = 0
    oldest_due_seconds: float | None = None
    #: Set while the queue is paused, with who paused it and why.
    paused_at: dt.datetime | None = None
    paused_by: str | None = None
    pause_reason: str | None = None


@dataclass
class Dashboard:
    queues: list[QueueRow]
    throughput: list[tuple[dt.datetime, int]]  # completed per minute, last hour
    failures_by_code: list[tuple[str, int]]  # last 24 h
    retry_rate: float | None  # retries / executions, last hour
    executions_last_hour: int
    durations: list[dict[str, Any]]  # per type: count, p50, p95 seconds, last hour
    workers: list[dict[str, Any]]
    sla_breaches: list[dict[str, Any]]
    retention: list[dict[str, Any]]
    generated_at: dt.datetime
    charts: dict[str, SafeString] = field(default_factory=dict)

    @property
    def failed_kept(self) -> int:
        """Every job whose status is failed now, however old: failed jobs are kept until someone
        retries them or RETENTION prunes them."""
        return sum(row.failed for row in self.queues)

    @property
    def failed_last_24h(self) -> int:
        """Jobs that ended failed in the last 24 hours and are failed still."""
        return sum(count for _, count in self.failures_by_code)


# Each aggregate matches one partial index exactly, so PostgreSQL answers from the index.
_PENDING = """
SELECT queue, count(*), count(*) FILTER (WHERE available_at <= now()),
       EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE available_at <= now()))
FROM django_jobs_job WHERE status = 'pending' GROUP BY queue
"""
_RUNNING = """
SELECT queue, count(*), count(*) FILTER (WHERE lease_expires_at < now())
FROM django_jobs_job WHERE status = 'running' GROUP BY queue
"""
_PROBLEMS = """
SELECT queue, status, count(*) FROM django_jobs_job
WHERE status IN ('failed', 'needs_review') GROUP BY queue, status
"""
_PAUSED = "SELECT name, paused_at, paused_by, reason FROM django_jobs_queue_state WHERE paused_at IS NOT NULL"
_THROUGHPUT = """
SELECT date_trunc('minute', finished_at) AS minute, count(*) FROM django_jobs_job
WHERE status = 'completed' AND finished_at > now() - interval '1 hour'
GROUP BY minute ORDER BY minute
"""
_FAILURES = """
SELECT coalesce(last_error_code, 'UNKNOWN'), count(*) FROM django_jobs_job
WHERE status = 'failed' AND finished_at > now() - interval '24 hours'
GROUP BY 1 ORDER BY 2 DESC
"""
_RETRIES = """
SELECT count(*) FROM django_jobs_jobevent
WHERE kind = 'retry_scheduled' AND created_at > now() - interval '1 hour'
"""
_FINISHED_LAST_HOUR = """
SELECT count(*) FROM django_jobs_job
WHERE status IN ('completed', 'failed', 'skipped') AND finished_at > now() - interval '1 hour'
"""
_DURATIONS = """
SELECT type, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM finished_at - started_at)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM finished_at - started_at))
FROM django_jobs_job
WHERE status = 'completed' AND finished_at > now() - interval '1 hour'
GROUP BY type ORDER BY type
"""
_SLA = """
SELECT count(*), EXTRACT(EPOCH FROM now() - min(available_at)) FROM (
    SELECT available_at FROM django_jobs_job
    WHERE type = %s AND status = 'pending' AND available_at < now() - make_interval(secs => %s)
    LIMIT %s
) AS late
"""
_HELD_BY = """
SELECT worker_id, count(*) FROM django_jobs_job
WHERE status = 'running' AND worker_id = ANY(%s) GROUP BY worker_id
"""
_PRUNABLE = """
SELECT count(*), min(finished_at) FROM (
    SELECT finished_at FROM django_jobs_job
    WHERE status = %s AND finished_at < now() - make_interval(secs => %s)
    LIMIT %s
) AS old
"""


def queue_rows() -> list[QueueRow]:
    """The per-queue figures of the dashboard, by queue name (the metrics view exports them)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        return sorted(_queue_rows(cursor).values(), key=lambda q: q.queue)


def _queue_rows(cursor: Any) -> dict[str, QueueRow]:
    queues: dict[str, QueueRow] = {}
    cursor.execute(_PENDING)
    for name, pending, due, oldest in cursor.fetchall():
        queues[name] = QueueRow(name, pending=pending, due=due, oldest_due_seconds=_float(oldest))
    cursor.execute(_RUNNING)
    for name, running, stale in cursor.fetchall():
        row = queues.setdefault(name, QueueRow(name))
        row.running, row.stale = running, stale
    cursor.execute(_PROBLEMS)
    for name, status, count in cursor.fetchall():
        row = queues.setdefault(name, QueueRow(name))
        setattr(row, status, count)
    # Idle queues too, so that they can be paused ahead of time: those the job types name,
    # and paused ones.
    for job_type in registry.all():
        queues.setdefault(job_type.default_queue, QueueRow(job_type.default_queue))
    cursor.execute(_PAUSED)
    for name, paused_at, paused_by, reason in cursor.fetchall():
        row = queues.setdefault(name, QueueRow(name))
        row.paused_at, row.paused_by, row.pause_reason = paused_at, paused_by, reason
    return queues


def build() -> Dashboard:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
        queues = _queue_rows(cursor)
        cursor.execute(_THROUGHPUT)
        throughput = [(minute, count) for minute, count in cursor.fetchall()]
        cursor.execute(_FAILURES)
        failures = [(code, count) for code, count in cursor.fetchall()]
        cursor.execute(_RETRIES)
        retries = cursor.fetchone()[0]
        cursor.execute(_FINISHED_LAST_HOUR)
        finished = cursor.fetchone()[0]
        cursor.execute(_DURATIONS)
        durations = [
            {"type": t, "count": n, "p50": _float(p50), "p95": _float(p95)}
            for t, n, p50, p95 in cursor.fetchall()
        ]
        sla = []
        for job_type in registry.all():
            if job_type.sla is None:
                continue
            cursor.execute(_SLA, [job_type.name, job_type.sla, COUNT_CAP])
            late, oldest = cursor.fetchone()
            sla.append({"type": job_type.name, "sla": job_type.sla, "late": late, "oldest": _float(oldest)})
        retention: list[dict[str, Any]] = []
        for status, keep in sorted(jobs_settings.RETENTION.items()):
            if keep is None:
                retention.append({"status": status, "keep": None})
                continue
            cursor.execute(_PRUNABLE, [status, keep, COUNT_CAP])
            count, oldest = cursor.fetchone()
            retention.append(
                {
                    "status": status,
                    "keep": keep,
                    "prunable": count,
                    "capped": count >= COUNT_CAP,
                    "oldest": oldest,
                }
            )
        live = list(LiveWorker.objects.using(jobs_settings.DATABASE).order_by("hostname", "pid"))
        # A silent worker's own last report says what it held then; once the reaper recovered
        # its jobs it holds nothing, whatever it last said. Count what it still holds.
        cursor.execute(_HELD_BY, [[w.worker_id for w in live]])
        held_by = dict(cursor.fetchall())
    executions = finished + retries
    workers = []
    for w in live:
        silent_seconds = (now - w.last_seen_at).total_seconds()
        silent = not w.is_alive(now)
        workers.append(
            {
                "worker": w,
                "silent_seconds": silent_seconds,
                "silent": silent,
                "holding": held_by.get(w.worker_id, 0) if silent else w.running,
            }
        )
    board = Dashboard(
        queues=sorted(queues.values(), key=lambda q: q.queue),
        throughput=throughput,
        failures_by_code=failures,
        retry_rate=retries / executions if executions else None,
        executions_last_hour=executions,
        durations=durations,
        workers=workers,
        sla_breaches=sla,
        retention=retention,
        generated_at=now,
    )
    board.charts = {
        "throughput": throughput_chart(throughput, now),
        "failures": bar_chart(failures),
    }
    return board


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---- charts -------------------------------------------------------------------------------------


def throughput_chart(
    points: list[tuple[dt.datetime, int]], now: dt.datetime, width: int = 720, height: int = 160
) -> SafeString:
    """Completed jobs per minute over the last hour, as an inline SVG column chart."""
    end = now.replace(second=0, microsecond=0)
    minutes = [end - dt.timedelta(minutes=59 - i) for i in range(60)]
    counts = dict(points)
    values = [counts.get(m, 0) for m in minutes]
    top = max(values) or 1
    bar = width / 60
    parts = [
        f'<svg class="djj-chart" viewBox="0 0 {width} {height + 20}" role="img" '
        f'aria-label="Completed jobs per minute, last hour (peak {top})">'
    ]
    for i, (minute, value) in enumerate(zip(minutes, values, strict=True)):
        h = round(height * value / top, 1)
        parts.append(
            f'<rect x="{i * bar + 1:.1f}" y="{height - h}" width="{bar - 2:.1f}" height="{h}">'
            f"<title>{minute:%H:%M} — {value} completed</title></rect>"
        )
    parts.append(f'<text x="0" y="{height + 15}">{minutes[0]:%H:%M}</text>')
    parts.append(f'<text x="{width}" y="{height + 15}" text-anchor="end">{minutes[-1]:%H:%M}</text>')
    parts.append(f'<text x="{width}" y="12" text-anchor="end">peak {top}/min</text></svg>')
    return mark_safe("".join(parts))  # numbers and dates only


def bar_chart(rows: list[tuple[str, int]], width: int = 720, row_height: int = 22) -> SafeString:
    """Horizontal bars with escaped labels, as inline SVG."""
    if not rows:
        return mark_safe('<p class="djj-empty">None.</p>')  # a constant
    top = max(count for _, count in rows) or 1
    label_width = 220
    parts = [f'<svg class="djj-chart" viewBox="0 0 {width} {row_height * len(rows)}" role="img">']
    for i, (label, count) in enumerate(rows):
        y = i * row_height
        w = round((width - label_width - 60) * count / top, 1)
        parts.append(f'<text x="0" y="{y + 15}">{escape(label)}</text>')
        parts.append(
            f'<rect class="djj-bad" x="{label_width}" y="{y + 3}" width="{w}" height="{row_height - 6}"/>'
        )
        parts.append(f'<text x="{label_width + w + 6}" y="{y + 15}">{count}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))  # labels are escaped above
