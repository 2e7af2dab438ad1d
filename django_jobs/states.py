"""Job statuses and the arrows between them. Pure: no database access.

Who moves a job in and out of each status (docs/lifecycle.md has the diagram):

- ``pending``: created by ``enqueue()``; a retryable error, the reaper or a manual retry moves a
  job back here. Left by a worker's claim (→ running) or a cancellation (→ cancelled).
- ``running``: entered only by a worker's claim, which mints a new ``execution_id``. Left by the
  outcome write of *that* execution (compare-and-set on id, execution_id and status; a job given
  back unstarted is such a write too), or by the reaper when the lease goes stale. Where it goes
  is decided by ``django_jobs.decision.decide``.
- ``completed``, ``skipped``, ``failed``, ``cancelled``: terminal for workers. Only an operator
  (manual retry) takes ``failed`` or ``cancelled`` back to ``pending``, or, for a workflow's
  step while a job it waits for has not ended, to ``waiting``.
- ``waiting``: a step of a workflow (``django_jobs.workflows``) born waiting for the jobs before
  it. When the last of them ends, the same transaction makes it ``pending`` (its condition
  holds: they completed, or its workflow runs on after a failure) or ``cancelled`` (it does
  not: its chain stopped); an operator may cancel it. A step its workflow stopped goes back from
  ``cancelled`` to ``waiting`` when an operator retries the job that stopped it.
- ``needs_review``: an execution that may have done its effect is parked here when a blind
  retry of its type is unsafe (the reaper, or the outcome write), and so is a pending job of a
  type that cannot reconcile when a restore hold is released; an operator resolves or
  retries it. It keeps its unique key meanwhile.
"""

from __future__ import annotations

from django.db import models


class JobStatus(models.TextChoices):
    WAITING = "waiting", "Waiting"
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"
    CANCELLED = "cancelled", "Cancelled"
    NEEDS_REVIEW = "needs_review", "Needs review"


#: A job in one of these states is live: it will still run.
ACTIVE_STATUSES: frozenset[str] = frozenset({JobStatus.WAITING, JobStatus.PENDING, JobStatus.RUNNING})

#: A job in one of these states has ended, as the jobs that wait for it count: a workflow's next
#: step is decided when every job it waits for is in one of them. ``needs_review`` has not
#: ended: a human will say how it did.
ENDED_STATUSES: frozenset[str] = frozenset(
    {JobStatus.COMPLETED, JobStatus.SKIPPED, JobStatus.FAILED, JobStatus.CANCELLED}
)
#: The ended statuses that count as a success for the steps that wait on them.
SUCCEEDED_STATUSES: frozenset[str] = frozenset({JobStatus.COMPLETED, JobStatus.SKIPPED})

#: A job in one of these states holds its unique key: a new job with the same key is not
#: created. ``needs_review`` holds it too: the job was parked because running its operation
#: again blindly is unsafe, so a new enqueue must not start that operation behind the
#: reviewer's back.
KEY_HOLDING_STATUSES: frozenset[str] = ACTIVE_STATUSES | {JobStatus.NEEDS_REVIEW}

#: The arrows of the state machine: source → the statuses it may move to.
TRANSITIONS: dict[str, frozenset[str]] = {
    # A workflow's step: due when the jobs it waits for ended as it needs, else stopped; or
    # cancelled by an operator. → needs_review: a step a restore hold's release settled, of a
    # type that cannot reconcile, as it becomes due; or one the operator found done (then
    # resolved at once, as a pending one).
    JobStatus.WAITING: frozenset({JobStatus.PENDING, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW}),
    # → needs_review: a restore hold's release, for a job whose type cannot reconcile, or that
    # the operator found done (then resolved at once: a pending job never completes unrun).
    # → waiting: a step made due and not started since, when a job it waits for is retried (it
    # waits for that job's end again).
    JobStatus.PENDING: frozenset(
        {JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW, JobStatus.WAITING}
    ),
    JobStatus.RUNNING: frozenset(
        {
            JobStatus.COMPLETED,
            JobStatus.PENDING,  # retry, recovery or release
            JobStatus.FAILED,
            JobStatus.SKIPPED,
            JobStatus.CANCELLED,
            JobStatus.NEEDS_REVIEW,
        }
    ),
    # → waiting: an operator's retry of a workflow's step while a job it waits for has not
    # ended (it becomes due when they have).
    JobStatus.FAILED: frozenset({JobStatus.PENDING, JobStatus.WAITING}),
    # → waiting: a step its workflow stopped, resumed by an operator's retry of the job that
    # stopped it; or an operator's retry of a step, as from failed.
    JobStatus.CANCELLED: frozenset({JobStatus.PENDING, JobStatus.WAITING}),
    JobStatus.NEEDS_REVIEW: frozenset(
        {JobStatus.PENDING, JobStatus.WAITING, JobStatus.COMPLETED, JobStatus.FAILED}
    ),
    JobStatus.COMPLETED: frozenset(),
    JobStatus.SKIPPED: frozenset(),
}


def can_transition(source: str, target: str) -> bool:
    """Whether the state machine has an arrow from ``source`` to ``target``."""
    return target in TRANSITIONS.get(source, frozenset())


class EventKind(models.TextChoices):
    """What a ``JobEvent`` records. The plain claim → complete path writes no event."""

    RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"
    CANCELLED = "cancelled", "Cancelled"
    RELEASED = "released", "Released by its worker"
    RECOVERED = "recovered", "Recovered by the reaper"
    NEEDS_REVIEW = "needs_review", "Parked for review"
    MANUAL_RETRY = "manual_retry", "Retried by an operator"
    CANCEL_REQUESTED = "cancel_requested", "Cancellation requested"
    RESOLVED = "resolved", "Resolved by an operator"
    RECONCILED = "reconciled", "Reconciled: the effect had already happened"
    #: Released from a restore hold: its next execution reconciles first, or, if it is running
    #: and its execution is lost, it is reconciled or parked instead of retried.
    RESTORE_RELEASED = "restore_released", "Released from a restore hold"
    #: A workflow's step: the jobs it waited for ended as it needs, and it became pending.
    DUE = "due", "Due: the jobs it waited for ended"
    #: A workflow's step cancelled because a job it waited for did not end as it needs.
    STOPPED = "stopped", "Stopped by its workflow"
    #: A stopped step waiting again: an operator retried the job that stopped it.
    RESUMED = "resumed", "Resumed: waits again"
    #: Not started by its start-by deadline: cancelled, code ``EXPIRED`` (the worker's start
    #: path, or the reaper's pass for a pending job).
    EXPIRED = "expired", "Expired: not started by its deadline"
    #: A durable job that sleeps or waits for a signal: pending, due at its wake time or timeout.
    SUSPENDED = "suspended", "Suspended: sleeps or waits for a signal"
    #: A sleeping durable job woken by an operator: its sleep ends now, and it is due now.
    WOKEN = "woken", "Woken by an operator"
    #: A signal an operator sent to a durable job from the console (``details``: its name, and
    #: whether it was stored and woke the job).
    SIGNAL_SENT = "signal_sent", "Signal sent by an operator"
