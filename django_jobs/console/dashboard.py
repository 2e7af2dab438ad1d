"""What the on-call engineer sees first: the figures of the dashboard, each one query served by
an index (the statements are in :mod:`django_jobs.reads`), and the SVG charts drawn from them
(no JavaScript, no CDN).

Every figure costs the same on a table of any size: a count that could reach millions stops at a
cap and says "10,000+", and a figure of a busy hour says which of its newest rows it was read
from (see :mod:`django_jobs.reads.queues` and :mod:`django_jobs.reads.activity`)."""

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
from django_jobs.reads.activity import activity
from django_jobs.reads.bounded import bounded_reads
from django_jobs.reads.clock import database_now
from django_jobs.reads.durable import DurableCounts, durable_counts
from django_jobs.reads.queues import QueueRow, queue_rows
from django_jobs.reads.replica import on_primary
from django_jobs.registry import registry

#: The late jobs of a type and the jobs retention will prune are counted up to this many (read
#: when the dashboard is built); beyond, the page says "10,000+": the dashboard stays fast on
#: any table.
COUNT_CAP = 10_000


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
    #: The pending durable jobs asleep and waiting for a signal, each counted up to its cap.
    durable: DurableCounts | None = None
    charts: dict[str, SafeString] = field(default_factory=dict)
    #: The minutes of ``throughput`` counted up to ``minute_cap`` only: they held more.
    capped_minutes: frozenset[dt.datetime] = frozenset()
    #: ``executions_last_hour`` and ``retry_rate`` are of the executions since this time: the
    #: newest ``sample`` when ``executions_sampled``, else the whole hour's.
    executions_since: dt.datetime | None = None
    executions_sampled: bool = False
    #: The retries were counted up to ``sample``: the rate is at least ``retry_rate``.
    retries_capped: bool = False
    #: ``failures_by_code`` holds the newest ``sample`` failures only: there were more.
    failures_sampled: bool = False
    #: ``durations`` are of the newest ``sample`` completions: the hour held more.
    durations_sampled: bool = False
    sample: int = 0
    minute_cap: int = 0

    @property
    def failed_kept(self) -> int:
        """Every job whose status is failed now, however old: failed jobs are kept until someone
        retries them or RETENTION prunes them."""
        return sum(row.failed for row in self.queues)

    @property
    def failed_kept_capped(self) -> bool:
        """Whether a queue's failed jobs were counted up to its cap only: there are more."""
        return any(row.failed >= row.cap for row in self.queues)

    @property
    def queues_capped(self) -> bool:
        """Whether a count of the queue table stopped at its cap."""
        return any(
            max(row.waiting, row.pending, row.due, row.failed, row.needs_review) >= row.cap
            for row in self.queues
        )

    @property
    def failed_last_24h(self) -> int:
        """Jobs that ended failed in the last 24 hours and are failed still."""
        return sum(count for _, count in self.failures_by_code)


def build() -> Dashboard:
    """Every figure of the dashboard, read now, in one transaction (the capped reads want the
    JIT compiler off: :mod:`django_jobs.reads.bounded`)."""
    with bounded_reads():
        return _build()


def _build() -> Dashboard:
    now = database_now()
    queues = queue_rows()
    recent = activity()
    cap = COUNT_CAP
    slas = {t.name: t.sla for t in registry.all() if t.sla is not None}
    late = reads.late_jobs(slas, cap)
    sla = [
        {"type": name, "sla": seconds, "late": late[name][0], "cap": cap, "oldest": late[name][1]}
        for name, seconds in slas.items()
    ]
    kept = sorted(jobs_settings.RETENTION.items())
    prunable = reads.prunable({status: keep for status, keep in kept if keep is not None}, cap)
    retention: list[dict[str, Any]] = []
    for status, keep in kept:
        if keep is None:
            retention.append({"status": status, "keep": None})
            continue
        count, oldest_finished = prunable[status]
        retention.append(
            {
                "status": status,
                "keep": keep,
                "prunable": count,
                "capped": count >= cap,
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
    with on_primary():  # its holders are the primary's sessions and slots, whatever the page reads
        held = horizon.held_horizon()
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
        horizon=[{"holder": h, "remedy": horizon.remedy(h)} for h in held],
        restore_hold=open_hold(jobs_settings.DATABASE),
        durable=durable_counts(),
        capped_minutes=recent.capped_minutes,
        executions_since=recent.executions_since,
        executions_sampled=recent.executions_sampled,
        retries_capped=recent.retries_capped,
        failures_sampled=recent.failures_sampled,
        durations_sampled=recent.durations_sampled,
        sample=recent.sample,
        minute_cap=recent.minute_cap,
    )
    board.charts = {
        "throughput": throughput_chart(recent.throughput, now, recent.capped_minutes),
        "failures": bar_chart(recent.failures_by_code),
    }
    return board


# ---- charts -------------------------------------------------------------------------------------


def throughput_chart(
    points: list[tuple[dt.datetime, int]],
    now: dt.datetime,
    capped: frozenset[dt.datetime] = frozenset(),
    width: int = 720,
    height: int = 160,
) -> SafeString:
    """Completed jobs per minute over the last hour, as an inline SVG column chart; the columns
    of the ``capped`` minutes, counted up to their cap only, are lighter and say "+"."""
    end = now.replace(second=0, microsecond=0)
    minutes = [end - dt.timedelta(minutes=59 - i) for i in range(60)]
    counts = dict(points)
    values = [counts.get(m, 0) for m in minutes]
    top = max(values) or 1
    more = "+" if any(m in capped for m, v in zip(minutes, values, strict=True) if v == top) else ""
    bar = width / 60
    parts = [
        f'<svg class="djj-chart" viewBox="0 0 {width} {height + 20}" role="img" '
        f'aria-label="Completed jobs per minute, last hour (peak {top}{more})">'
    ]
    for i, (minute, value) in enumerate(zip(minutes, values, strict=True)):
        h = round(height * value / top, 1)
        kind, plus = (' class="djj-capped"', "+") if minute in capped else ("", "")
        parts.append(
            f'<rect{kind} x="{i * bar + 1:.1f}" y="{height - h}" width="{bar - 2:.1f}" height="{h}">'
            f"<title>{minute:%H:%M} — {value}{plus} completed</title></rect>"
        )
    parts.append(f'<text x="0" y="{height + 15}">{minutes[0]:%H:%M}</text>')
    parts.append(f'<text x="{width}" y="{height + 15}" text-anchor="end">{minutes[-1]:%H:%M}</text>')
    parts.append(f'<text x="{width}" y="12" text-anchor="end">peak {top}{more}/min</text></svg>')
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
