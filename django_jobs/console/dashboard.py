"""What the on-call engineer sees first: the figures of the dashboard, each one query served by
an index (the statements are in :mod:`django_jobs.reads`), and the SVG charts drawn from them
(no JavaScript, no CDN)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from django_jobs.conf import jobs_settings
from django_jobs.models import LiveWorker, RestoreHold
from django_jobs.models.restore import open_hold
from django_jobs.observe import horizon
from django_jobs.reads import dashboard as reads
from django_jobs.reads.clock import database_now
from django_jobs.reads.queues import QueueRow, queue_rows
from django_jobs.registry import registry

#: Counting beyond this many rows says "N+" instead: the dashboard stays fast on any table.
COUNT_CAP = 100_000


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
    #: What holds the vacuum horizon back, as checkjobs names it: holder, remedy.
    horizon: list[dict[str, Any]] = field(default_factory=list)
    #: The open restore hold, if one is: the jobs of external types wait for an operator.
    restore_hold: RestoreHold | None = None
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


def build() -> Dashboard:
    """Every figure of the dashboard, read now."""
    now = database_now()
    queues = queue_rows()
    recent = reads.activity()
    sla = []
    for job_type in registry.all():
        if job_type.sla is None:
            continue
        late, oldest = reads.late_jobs(job_type.name, job_type.sla, COUNT_CAP)
        sla.append({"type": job_type.name, "sla": job_type.sla, "late": late, "oldest": oldest})
    retention: list[dict[str, Any]] = []
    for status, keep in sorted(jobs_settings.RETENTION.items()):
        if keep is None:
            retention.append({"status": status, "keep": None})
            continue
        count, oldest_finished = reads.prunable(status, keep, COUNT_CAP)
        retention.append(
            {
                "status": status,
                "keep": keep,
                "prunable": count,
                "capped": count >= COUNT_CAP,
                "oldest": oldest_finished,
            }
        )
    live = list(LiveWorker.objects.using(jobs_settings.DATABASE).order_by("hostname", "pid"))
    # A silent worker's own last report says what it held then; once the reaper recovered
    # its jobs it holds nothing, whatever it last said. Count what it still holds.
    held_by = reads.held_by([w.worker_id for w in live])
    executions = recent.finished + recent.retries
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
        queues=queues,
        throughput=recent.throughput,
        failures_by_code=recent.failures_by_code,
        retry_rate=recent.retries / executions if executions else None,
        executions_last_hour=executions,
        durations=recent.durations,
        workers=workers,
        sla_breaches=sla,
        retention=retention,
        generated_at=now,
        horizon=[{"holder": h, "remedy": horizon.remedy(h)} for h in horizon.held_horizon()],
        restore_hold=open_hold(jobs_settings.DATABASE),
    )
    board.charts = {
        "throughput": throughput_chart(recent.throughput, now),
        "failures": bar_chart(recent.failures_by_code),
    }
    return board


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
