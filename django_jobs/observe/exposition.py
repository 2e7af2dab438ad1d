"""What a scrape is served besides a process's own counters: the database's state per queue,
as gauges (:func:`queue_families`, the dashboard's own figures from
``django_jobs.reads.queues.queue_rows``), and the check of a scrape's bearer token.

The metrics view of ``django_jobs.urls`` serves both; the worker's ``--metrics-port`` checks the
token too.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django_jobs.observe.labels import PREFIX

if TYPE_CHECKING:
    from django_jobs.reads.queues import QueueRow


def bearer_token_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header presents ``token`` as its bearer token.

    Compared in constant time: the time to refuse says nothing of how close a guess was.
    """
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


#: (metric suffix, QueueRow attribute, help): the dashboard's per-queue figures.
QUEUE_GAUGES = (
    ("queue_waiting", "waiting", "Workflow steps waiting for the jobs before them to end."),
    ("queue_pending", "pending", "Pending jobs, due now or later."),
    ("queue_due", "due", "Pending jobs due now (available_at <= now()): claimable unless paused or held."),
    ("queue_oldest_due_seconds", "oldest_due_seconds",
     "Age of the oldest job due now, in seconds since its available_at (0 with none due)."),
    ("queue_running", "running", "Running jobs."),
    ("queue_stale_running", "stale", "Running jobs whose lease expired: the reaper takes them back."),
    ("queue_failed", "failed", "Failed jobs kept (until retried or pruned by RETENTION)."),
    ("queue_needs_review", "needs_review", "Jobs parked for review."),
    ("queue_paused", "paused", "1 while the queue is paused, else 0."),
)  # fmt: skip


def queue_families(rows: Iterable[QueueRow]) -> Iterator[Any]:
    """The per-queue gauges of the dashboard's rows, as prometheus-client metric families."""
    from prometheus_client.core import GaugeMetricFamily

    families = {
        attr: GaugeMetricFamily(f"{PREFIX}_{suffix}", text, labels=["queue"])
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
