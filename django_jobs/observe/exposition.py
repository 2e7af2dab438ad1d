"""What a scrape is served besides a process's own counters: the database's state per queue,
as gauges (:func:`queue_families`, the dashboard's own figures from
``django_jobs.reads.queues.queue_rows``), the durable jobs asleep and waiting for a signal
(:func:`durable_families`, from ``django_jobs.reads.durable.durable_counts``), how far behind
the replica they were read from is (:func:`replica_family`, with ``CONSOLE_DATABASE``), and the
check of a scrape's bearer token.

The metrics view of ``django_jobs.urls`` serves them all; the worker's ``--metrics-port`` checks the
token too.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django_jobs.observe.labels import PREFIX

if TYPE_CHECKING:
    from django_jobs.reads.durable import DurableCounts
    from django_jobs.reads.queues import QueueRow
    from django_jobs.reads.replica import Lag

#: The lag's gauge, served only while the view reads from a replica (``CONSOLE_DATABASE``).
REPLICA_LAG = (
    "console_replica_lag_seconds",
    "How far behind the primary the replica the queue gauges were read from is, in seconds: 0 when "
    "it replayed all it received, NaN when nobody can say (unreachable, not a standby, nothing "
    "replayed yet).",
)


def bearer_token_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header presents ``token`` as its bearer token.

    Compared in constant time: the time to refuse says nothing of how close a guess was.
    """
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


#: Said of the gauges counted up to ``django_jobs.reads.queues.COUNT_CAP``, which a busy
#: backlog or the failed jobs kept may pass: a scrape costs the same on any table.
_CAPPED = " Counted up to {cap:,}: a value of {cap:,} means at least that many."
#: (metric suffix, QueueRow attribute, help): the dashboard's per-queue figures.
QUEUE_GAUGES = (
    ("queue_waiting", "waiting", "Workflow steps waiting for the jobs before them to end." + _CAPPED),
    ("queue_pending", "pending", "Pending jobs, due now or later." + _CAPPED),
    ("queue_due", "due",
     "Pending jobs due now (available_at <= now()): claimable unless paused or held." + _CAPPED),
    ("queue_oldest_due_seconds", "oldest_due_seconds",
     "Age of the oldest job due now, in seconds since its available_at (0 with none due)."),
    ("queue_running", "running", "Running jobs."),
    ("queue_stale_running", "stale", "Running jobs whose lease expired: the reaper takes them back."),
    ("queue_failed", "failed", "Failed jobs kept (until retried or pruned by RETENTION)." + _CAPPED),
    ("queue_needs_review", "needs_review", "Jobs parked for review." + _CAPPED),
    ("queue_paused", "paused", "1 while the queue is paused, else 0."),
)  # fmt: skip


def queue_families(rows: Iterable[QueueRow]) -> Iterator[Any]:
    """The per-queue gauges of the dashboard's rows, as prometheus-client metric families."""
    from prometheus_client.core import GaugeMetricFamily

    from django_jobs.reads.queues import COUNT_CAP

    families = {
        attr: GaugeMetricFamily(f"{PREFIX}_{suffix}", text.format(cap=COUNT_CAP), labels=["queue"])
        for suffix, attr, text in QUEUE_GAUGES
    }
    for row in rows:
        for attr, family in families.items():
            if attr == "paused":
                value: float = 1.0 if row.paused_at is not None else 0.0
            else:
                value = float(getattr(row, attr) or 0)
            family.add_metric([row.queue], value)
    yield from families.values()


#: (metric suffix, help) of the durable jobs' gauges: the jobs by ``state``, sleeping or waiting
#: (a state a job is in, so that their sum means something), and the waits past their timeout,
#: apart: they are among the waiting ones.
DURABLE_JOBS = (
    "durable_jobs",
    "Pending durable jobs asleep (state=sleeping) or waiting for a signal (state=waiting)." + _CAPPED,
)
DURABLE_WAITS_OVERDUE = (
    "durable_waits_overdue",
    "Durable jobs waiting for a signal past their timeout (among state=waiting): due, for a worker "
    "to take and time the wait out." + _CAPPED,
)


def durable_families(counts: DurableCounts) -> Iterator[Any]:
    """The durable jobs' gauges of the dashboard's counts, as prometheus-client metric families."""
    from prometheus_client.core import GaugeMetricFamily

    suffix, text = DURABLE_JOBS
    jobs = GaugeMetricFamily(f"{PREFIX}_{suffix}", text.format(cap=counts.cap), labels=["state"])
    jobs.add_metric(["sleeping"], float(counts.sleeping))
    jobs.add_metric(["waiting"], float(counts.waiting))
    yield jobs
    suffix, text = DURABLE_WAITS_OVERDUE
    yield GaugeMetricFamily(f"{PREFIX}_{suffix}", text.format(cap=counts.cap), value=float(counts.overdue))


def replica_family(lag: Lag) -> Any:
    """The replica's lag as a prometheus-client gauge family, labelled with its alias."""
    from prometheus_client.core import GaugeMetricFamily

    suffix, text = REPLICA_LAG
    family = GaugeMetricFamily(f"{PREFIX}_{suffix}", text, labels=["database"])
    family.add_metric([lag.alias], lag.gauge)
    return family
