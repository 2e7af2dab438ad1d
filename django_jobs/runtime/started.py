"""``job_started``: the signal a worker sends as a handler is about to run, with the times a
receiver measures the pickup latency from (``created_at``: the enqueue; ``available_at``: when
it was due).

The claim does not return those columns: the times are read after the claim, for the whole
batch in one statement, and only while ``job_started`` has a receiver, so a worker without one
reads nothing more per job (as ``observe.tracing.attach_contexts`` does for trace contexts).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import Error as DatabaseError  # every database error, InterfaceError included

from django_jobs import signals
from django_jobs.models import Job
from django_jobs.observe import tracing
from django_jobs.reads.start_times import start_times
from django_jobs.transitions import Claim


def read_after_claim(claims: Sequence[Claim]) -> None:
    """What the executions of ``claims`` need beyond the claim's own columns, read for the whole
    batch: the stored trace contexts (when tracing) and the start times (when ``job_started``
    has a receiver)."""
    tracing.attach_contexts(claims)
    _attach_start_times(claims)


def _attach_start_times(claims: Sequence[Claim]) -> None:
    """Read the enqueue and due times of the claimed jobs onto their claims (one statement),
    when ``job_started`` has a receiver. The jobs are claimed already: a database error here
    leaves the times out, and the signal sends None for them."""
    if not claims or not signals.listened(signals.job_started):
        return
    try:
        found = start_times([claim.id for claim in claims])
    except DatabaseError:  # the handlers will meet the outage; their jobs must still run
        return
    for claim in claims:
        claim.start_times = found.get(claim.id)


def send_job_started(claim: Claim, worker_id: str | None) -> None:
    """Send ``job_started`` for ``claim``'s execution, with the times read after its claim
    (None if they could not be read, or no receiver listened when it was claimed)."""
    created_at, available_at = claim.start_times or (None, None)
    signals.send(
        signals.job_started, Job, job_id=claim.id, type=claim.type, queue=claim.queue,
        attempt=claim.attempt, execution_id=claim.execution_id, worker_id=worker_id,
        created_at=created_at, available_at=available_at,
    )  # fmt: skip
