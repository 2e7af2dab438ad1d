"""The only writer of ``Job.status``. One function per arrow of the state machine.

Every write after a claim is a compare-and-set on ``(id, execution_id, status='running')``: an
execution whose lease was taken over (a zombie) matches no row and changes nothing; callers
learn it from the returned ids. Each arrow off the plain claim → complete path inserts its
``JobEvent`` in the same statement, so the event exists exactly when the transition happened.
Time is always the database's ``now()``.

- ``enqueue``: the INSERT of new jobs (the arrow into ``pending``) and the read of key holders;
- ``effects``: the keys of side effects that happened (``django_jobs.effects.once``);
- ``execution``: the claim, which starts an execution (and ``claimable``, the same rule as a
  read) — the hot path;
- ``leases``: the writes of a running execution (heartbeat, progress, checkpoint, cut leases);
- ``outcomes``: the end of an execution (a release is an outcome too) — the hot path;
- ``operator``: what people do (cancel, manual retry, resolve), with actor and reason;
- ``queues``: what people do to queues (pause, resume), with actor and reason;
- ``ending``: the row of a running execution, locked, for a writer that decides its end again;
- ``calls``: the marks an execution commits before it calls out, and their ends;
- ``recovery``: the reaper's writes (expired leases, retention);
- ``schedules``: the tick rows of periodic jobs (one per tick, whatever the workers);
- ``workers``: worker processes reporting themselves alive;
- ``workflows``: jobs born waiting, the triggers that make them due (or stop or resume them)
  when the jobs they wait for end, and an operator's cancel of a whole workflow.
- ``guards``: the ownership guard as the statements of many jobs write it (a query plan's
  matter, see there);
- ``removal``: what the self-test (``manage.py jobsselftest``) removes of its own run.
"""

from django_jobs.transitions.calls import end_call, mark_call, marked_calls
from django_jobs.transitions.claimable import claim_statement
from django_jobs.transitions.ending import Running, lock_running
from django_jobs.transitions.execution import (
    Claim,
    ClaimStatement,
    Outlook,
    claim,
    open_rate_windows,
    outlook,
)
from django_jobs.transitions.expiry import expire_at_start, expire_pending
from django_jobs.transitions.leases import Beat, cut_leases, heartbeat, set_checkpoint, set_progress
from django_jobs.transitions.manual_retry import KeyHeld, StepRefused, manual_retry
from django_jobs.transitions.operator import (
    RETRYABLE_BY_OPERATOR,
    ActionRefused,
    CancelResult,
    cancel,
    resolve,
)
from django_jobs.transitions.outcomes import Outcome, cancel_requested_among, write_outcomes
from django_jobs.transitions.queues import pause as pause_queue
from django_jobs.transitions.queues import resume as resume_queue
from django_jobs.transitions.recovery import Expired, Recovery, forget_idle_keys, prune, recover_expired
from django_jobs.transitions.schedules import (
    ClaimedTick,
    claim_tick,
    last_ticks,
    prune_ticks,
    record_run_now,
    record_tick_job,
)
from django_jobs.transitions.schedules import disable as disable_schedule
from django_jobs.transitions.schedules import enable as enable_schedule
from django_jobs.transitions.workers import any_active, forget_worker, report_worker
from django_jobs.transitions.workflow_retention import PrunedWorkflows, prune_workflows
from django_jobs.transitions.workflows import cancel_workflow

__all__ = [
    "RETRYABLE_BY_OPERATOR",
    "ActionRefused",
    "Beat",
    "CancelResult",
    "Claim",
    "ClaimStatement",
    "ClaimedTick",
    "Expired",
    "KeyHeld",
    "Outcome",
    "Outlook",
    "PrunedWorkflows",
    "Recovery",
    "Running",
    "StepRefused",
    "any_active",
    "cancel",
    "cancel_requested_among",
    "cancel_workflow",
    "claim",
    "claim_statement",
    "claim_tick",
    "cut_leases",
    "disable_schedule",
    "enable_schedule",
    "end_call",
    "expire_at_start",
    "expire_pending",
    "forget_idle_keys",
    "forget_worker",
    "heartbeat",
    "last_ticks",
    "lock_running",
    "manual_retry",
    "mark_call",
    "marked_calls",
    "open_rate_windows",
    "outlook",
    "pause_queue",
    "prune",
    "prune_ticks",
    "prune_workflows",
    "record_run_now",
    "record_tick_job",
    "recover_expired",
    "report_worker",
    "resolve",
    "resume_queue",
    "set_checkpoint",
    "set_progress",
    "write_outcomes",
]
