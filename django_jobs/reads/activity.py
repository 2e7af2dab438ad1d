"""The dashboard's last hour (and, for failures, last day): completions per minute, the retry
rate, processing times by type, failures by error code.

Each figure costs the same however many jobs the table holds and however busy the hour was,
where counting the hour would read every job it finished (hundreds of thousands, on a busy
system). Each is exact, over what it says it read:

- each minute's completions are counted up to :data:`MINUTE_CAP`; a busier minute shows the
  cap and a "+";
- the retry rate is that of the newest :data:`SAMPLE` executions that finished a job, and of the
  retries scheduled since the oldest of them: the whole hour when it held fewer;
- processing times are those of the newest :data:`SAMPLE` completions of the hour;
- failures by code are those of the newest :data:`SAMPLE` failures of the last 24 hours.

No count is extrapolated: an outcome writer stamps a whole batch with one ``now()``, so the pace
of a few hundred rows says little of a minute's. ``django_jobs_completed_total`` and its
siblings count every execution, at any rate.

The hour is that of the dashboard's chart: the 60 minutes up to now, the current one included.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django_jobs.reads.bounded import bounded_cursor

#: Completions counted per minute, at most.
MINUTE_CAP = 1_000
#: Executions read for the retry rate, completions for the processing times, failures for their
#: codes, at most.
SAMPLE = 10_000

#: Per minute of the last 60, its completed jobs up to a cap: django_jobs_finished (status,
#: finished_at), a range of it per minute stopped by its LIMIT. The minutes come from an integer
#: series, whose 60 rows the planner knows.
MINUTES = """
SELECT m.minute, (SELECT count(*) FROM (
    SELECT FROM django_jobs_job
    WHERE status = 'completed' AND finished_at >= m.minute AND finished_at < m.minute + interval '1 minute'
    LIMIT %(cap)s) AS completed)
FROM (SELECT date_trunc('minute', now()) - make_interval(mins => n) AS minute
      FROM generate_series(0, 59) AS n) AS m
ORDER BY m.minute
"""
#: The newest executions of the hour that finished a job (completed, failed, skipped), up to a
#: sample: how many, since when (the hour's start when they are fewer), and the retries
#: scheduled since then, up to the same number. django_jobs_finished read backwards from now for
#: each status (each stopped by its LIMIT, the three merged), then django_jobs_event_kind (kind,
#: created_at) from the oldest of them.
EXECUTIONS = """
WITH newest AS (
    SELECT finished_at FROM (
        (SELECT finished_at FROM django_jobs_job
         WHERE status = 'completed' AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
         ORDER BY finished_at DESC LIMIT %(sample)s)
        UNION ALL
        (SELECT finished_at FROM django_jobs_job
         WHERE status = 'failed' AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
         ORDER BY finished_at DESC LIMIT %(sample)s)
        UNION ALL
        (SELECT finished_at FROM django_jobs_job
         WHERE status = 'skipped' AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
         ORDER BY finished_at DESC LIMIT %(sample)s)
    ) AS each_status
    ORDER BY finished_at DESC LIMIT %(sample)s
), span AS (
    SELECT count(*) AS finished,
           CASE WHEN count(*) < %(sample)s THEN date_trunc('minute', now()) - interval '59 minutes'
                ELSE min(finished_at) END AS since
    FROM newest
)
SELECT span.finished, span.since, (SELECT count(*) FROM (
    SELECT FROM django_jobs_jobevent WHERE kind = 'retry_scheduled' AND created_at >= span.since
    LIMIT %(sample)s) AS retried)
FROM span
"""
#: Per type, count and p50 / p95 seconds of the newest completions of the hour, up to a sample:
#: django_jobs_finished read backwards, which includes type and started_at (the table is not
#: read).
DURATIONS = """
SELECT type, count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY seconds)
FROM (
    SELECT type, EXTRACT(EPOCH FROM finished_at - started_at) AS seconds FROM django_jobs_job
    WHERE status = 'completed' AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
    ORDER BY finished_at DESC LIMIT %(sample)s
) AS newest
GROUP BY type ORDER BY type
"""
#: The newest jobs failed in the last 24 hours and failed still, up to a sample, per error code:
#: django_jobs_problems (status, finished_at, queue, last_error_code) read backwards.
FAILURES = """
SELECT coalesce(code, 'UNKNOWN'), count(*) FROM (
    SELECT last_error_code AS code FROM django_jobs_job
    WHERE status = 'failed' AND finished_at > now() - interval '24 hours'
    ORDER BY finished_at DESC LIMIT %(sample)s
) AS newest
GROUP BY 1 ORDER BY 2 DESC, 1
"""


@dataclass(frozen=True)
class Activity:
    """The last hour (and, for failures, the last day) of the job table, each figure over what
    it read."""

    #: Completed per minute, the 60 minutes up to now; at least this many for the minutes in
    #: ``capped_minutes`` (:data:`MINUTE_CAP` or more).
    throughput: list[tuple[dt.datetime, int]]
    capped_minutes: frozenset[dt.datetime]
    #: Executions that finished a job (completed, failed, skipped) since ``executions_since``,
    #: and the retries scheduled since then (at most ``sample``: ``retries_capped``).
    finished: int
    retries: int
    #: When the executions counted begin: the hour's start, or later when it held more than
    #: ``sample`` of them (the newest ``sample`` were read).
    executions_since: dt.datetime
    executions_sampled: bool
    retries_capped: bool
    #: Failed in the last 24 hours and failed still, per code: of the newest ``sample``
    #: failures when ``failures_sampled``.
    failures_by_code: list[tuple[str, int]]
    failures_sampled: bool
    #: Per type: count, p50, p95 seconds; of the newest ``sample`` completions when
    #: ``durations_sampled``.
    durations: list[dict[str, Any]]
    durations_sampled: bool
    #: The caps the figures above were read with.
    sample: int = SAMPLE
    minute_cap: int = MINUTE_CAP


def activity() -> Activity:
    """The dashboard's figures of the last hour, and the last day's failures by code, each read
    up to :data:`MINUTE_CAP` a minute or :data:`SAMPLE` rows (both read when called)."""
    cap, sample = MINUTE_CAP, SAMPLE
    with bounded_cursor() as cursor:
        cursor.execute(MINUTES, {"cap": cap})
        throughput = [(minute, count) for minute, count in cursor.fetchall()]
        cursor.execute(EXECUTIONS, {"sample": sample})
        finished, since, retries = cursor.fetchone()
        cursor.execute(DURATIONS, {"sample": sample})
        durations = [
            {"type": t, "count": n, "p50": _float(p50), "p95": _float(p95)}
            for t, n, p50, p95 in cursor.fetchall()
        ]
        cursor.execute(FAILURES, {"sample": sample})
        failures = [(code, count) for code, count in cursor.fetchall()]
    return Activity(
        throughput=throughput,
        capped_minutes=frozenset(minute for minute, count in throughput if count >= cap),
        finished=finished,
        retries=retries,
        executions_since=since,
        executions_sampled=finished >= sample,
        retries_capped=retries >= sample,
        failures_by_code=failures,
        failures_sampled=sum(count for _, count in failures) >= sample,
        durations=durations,
        durations_sampled=sum(d["count"] for d in durations) >= sample,
        sample=sample,
        minute_cap=cap,
    )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
