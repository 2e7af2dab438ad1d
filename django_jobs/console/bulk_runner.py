"""The job that carries a bulk operation out: type ``django_jobs.bulk``, payload
``{"operation": id}``, enqueued by :func:`django_jobs.console.bulk.start`.

It works through the operation's jobs in id order, a batch per transaction of the jobs
database. Each batch locks the operation's row, reads its cursor, acts on the next jobs with the
guarded one-job transition (fenced by the status and execution each job was seen in), then
records what became of them and moves the cursor, before it commits. So:

- a crash (the worker killed, the database gone) loses the batch under way or nothing: the
  job's next attempt starts after the last batch that committed, and no job is acted on twice;
- two runs at once (a frozen worker that comes back) take turns on the row lock, and the
  second finds the cursor moved;
- a worker frozen in the middle of a batch (SIGSTOP, a VM paused) holds the row lock: its
  session is ended by PostgreSQL after ``BATCH_IDLE_LIMIT`` seconds idle in the transaction,
  which rolls the batch back and lets the run that took over its job go on;
- a stop (``bulk.stop_operation``) is seen at the next batch, which does not start.

The pace (jobs per second) is a cap, not an average: no second, wherever it starts, holds more
than ``pace`` of the jobs acted on. The runner makes ``k = ceil(pace / BATCH_LIMIT)`` batches a
second, sized so that any ``k`` in a row add up to ``pace`` (250 a second: batches of 125), and
starts each one ``1/k`` s after the one before, and a second after the batch ``k`` before it
ended: a second, wherever it starts, holds jobs of at most ``k`` batches. A run goes at a little
under ``pace`` on average: the time each batch takes to write is added once per ``k``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any

from django.db import transaction

from django_jobs.conf import jobs_settings
from django_jobs.errors import PermanentError
from django_jobs.models import BulkAction, BulkOperation, BulkOutcome, BulkState
from django_jobs.registry import job
from django_jobs.runtime.context import JobContext
from django_jobs.transitions import bulk as bulk_writes
from django_jobs.transitions.manual_retry import KeyHeld, StepRefused, manual_retry
from django_jobs.transitions.operator import ActionRefused, CancelResult, Seen, cancel

RUNNER_TYPE = "django_jobs.bulk"
#: The most jobs one batch (one transaction) acts on; a slower pace makes batches smaller.
BATCH_LIMIT = 200
#: A batch's transaction is idle only while Python moves from one statement to the next: idle
#: this long, its process is frozen, and PostgreSQL ends the session (and the row lock).
BATCH_IDLE_LIMIT = 10
#: The longest sleep between two looks at whether the job should stop.
_NAP = 0.5


@job(RUNNER_TYPE, max_attempts=50, external=False)  # it writes only the job tables
def carry_out(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    operation_id = payload.get("operation")
    if isinstance(operation_id, bool) or not isinstance(operation_id, int) or operation_id < 1:
        raise PermanentError(f"the payload names no bulk operation: {payload!r:.100}")
    batches = 0
    #: When each of the last k batches committed (monotonic), oldest first.
    ended: deque[float] = deque()
    while True:
        ctx.raise_if_cancelled()
        state = _one_batch(operation_id, batches)
        ended.append(time.monotonic())
        ctx.progress(state.done + state.skipped, state.total)
        if state.state != BulkState.RUNNING or state.acted == 0:
            return {
                "operation": operation_id,
                "state": state.state,
                "done": state.done,
                "skipped": state.skipped,
            }
        batches += 1
        per_second = batches_a_second(state.pace)
        while len(ended) > per_second:
            ended.popleft()
        # Spread over the second, and never k + 1 batches' writes within one second: the next
        # batch writes over a second after the one k before it has written its last.
        start = state.began + 1 / per_second
        _wait(ctx, max(start, ended[0] + 1) if len(ended) == per_second else start)


def batches_a_second(pace: int) -> int:
    """How many batches a second carry ``pace`` jobs a second, none above ``BATCH_LIMIT``."""
    return max(1, math.ceil(pace / BATCH_LIMIT))


def batch_size(pace: int, index: int) -> int:
    """The size of the run's ``index``-th batch (from 0): ``pace`` split over a second's
    batches, the remainder spread so that any ``batches_a_second(pace)`` in a row add up to
    ``pace`` exactly (401 a second: 134, 134, 133, 134, 134, 133, …)."""
    per_second = batches_a_second(pace)
    size, remainder = divmod(pace, per_second)
    return size + (1 if index % per_second < remainder else 0)


class _State:
    def __init__(self, operation: BulkOperation, acted: int, began: float) -> None:
        self.state, self.total, self.pace = operation.state, operation.total, operation.pace
        self.done, self.skipped, self.acted = operation.done, operation.skipped, acted
        #: A monotonic time before the batch's first write: the next batch starts 1/k s after.
        self.began = began


def _one_batch(operation_id: int, index: int = 0) -> _State:
    """Act on the operation's next batch (the run's ``index``-th); its state after, and how
    many jobs the batch held (0 when it has ended, or ended now)."""
    alias = jobs_settings.DATABASE
    with transaction.atomic(using=alias):
        operation = bulk_writes.lock(operation_id, BATCH_IDLE_LIMIT)
        began = time.monotonic()
        if operation is None:
            raise PermanentError(f"no bulk operation has id {operation_id}")
        if operation.state != BulkState.RUNNING:
            return _State(operation, 0, began)
        batch = bulk_writes.next_batch(operation.id, operation.last_job_id, batch_size(operation.pace, index))
        if not batch:
            bulk_writes.finish(operation.id)
            operation.refresh_from_db(using=alias)
            return _State(operation, 0, began)
        counts = bulk_writes.record_batch(operation.id, _act(operation, batch))
        if counts is None:  # unreachable while the row is locked; never act twice if it were
            raise RuntimeError(f"bulk operation {operation_id} moved under its lock")
        operation.done, operation.skipped = counts
        return _State(operation, len(batch), began)


#: What became of one job: its outcome, and why it was skipped (the refusal's words), if it was.
Acted = tuple[str, str | None]


def _act(operation: BulkOperation, batch: list[bulk_writes.Taken]) -> dict[int, Acted]:
    """Act on each job of ``batch`` as it was seen; what became of each."""
    present = bulk_writes.existing([taken.job_id for taken in batch])
    outcomes: dict[int, Acted] = {}
    for taken in batch:
        if taken.job_id not in present:
            outcomes[taken.job_id] = (BulkOutcome.GONE, None)
            continue
        seen = Seen(taken.status, taken.execution_id, operation.id, taken.manual_retries)
        outcomes[taken.job_id] = _act_on_one(operation, taken.job_id, seen)
    return outcomes


def _act_on_one(operation: BulkOperation, job_id: int, seen: Seen) -> Acted:
    """One job's action, in a savepoint of the batch's transaction: a refusal is that job's
    skip, with its reason, and never the batch's failure."""
    actor, reason = operation.actor, operation.reason
    if operation.action == BulkAction.RETRY:
        try:
            manual_retry(job_id, actor=actor, reason=reason, seen=seen)
        except KeyHeld as refused:
            return BulkOutcome.KEY_HELD, str(refused)
        except StepRefused as refused:
            return BulkOutcome.REFUSED, str(refused)
        except ActionRefused:
            return BulkOutcome.CHANGED, None
        return BulkOutcome.DONE, None
    if cancel(job_id, actor=actor, reason=reason, seen=seen) == CancelResult.NOT_CANCELLABLE:
        return BulkOutcome.CHANGED, None
    return BulkOutcome.DONE, None


def _wait(ctx: JobContext, until: float) -> None:
    """Sleep until ``until`` (monotonic), looking every so often whether the job must stop."""
    while (left := until - time.monotonic()) > 0:
        time.sleep(min(left, _NAP))
        ctx.raise_if_cancelled()
