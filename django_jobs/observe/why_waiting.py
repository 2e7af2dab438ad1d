"""Why a workflow's step does not run yet: it waits for the jobs before it to end (or, retried
by an operator after one of them failed, for that one's retry).

It reads the barrier the step waits on (``reads.workflows``): how many of those jobs have not
ended, and the first of them, with where each one is (running on which worker, pending, parked
for review).
"""

from __future__ import annotations

from django_jobs.models import Job
from django_jobs.observe.reasons import MAX_NAMED, Blocker, Reason
from django_jobs.reads import workflows

_RUNS_IF = {
    "succeeded": "it runs if they all complete, and is cancelled if one fails or is cancelled",
    "failed": "it runs if one of them fails or is cancelled, and is cancelled if they all complete",
    "ended": "it runs once they have all ended, however they end",
}


def blockers(job: Job, evidence: list[tuple[str, str]]) -> list[Blocker]:
    """Why ``job``, waiting, does not run: one reason, naming what it waits for."""
    waited = workflows.waits(job.id)
    if waited is None:  # a waiting job always has a step; a row written by hand may not
        return [
            Blocker(
                Reason.WAITING, "It waits, but no workflow step says for what: it will not run by itself."
            )
        ]
    size, remaining, failed = workflows.job_counts(waited)
    evidence.append(("workflow", f"{waited.workflow_id} ({waited.role})"))
    evidence.append(("waits for", f"{remaining} of {size} job(s) not ended, {failed} failed or cancelled"))
    condition = _RUNS_IF.get(waited.runs_if, "")
    if remaining == 0:
        return [_awaits_a_retry(waited, evidence, condition)]
    first = workflows.not_ended(waited, MAX_NAMED)
    named = [_where(*row) for row in first]
    if named:
        evidence.append(("not ended", "; ".join(named)))
    if size == 1 and named:
        sentence = f"It waits for {named[0]}: {condition}."
    else:
        sentence = (
            f"It waits for {remaining} of the {size} jobs before it in workflow {waited.workflow_id} to end"
            f" ({failed} failed or cancelled so far): {condition}."
        )
    return [Blocker(Reason.WAITING, sentence)]


def _awaits_a_retry(waited: workflows.Waits, evidence: list[tuple[str, str]], condition: str) -> Blocker:
    """A step an operator retried after the jobs it waits for ended, one of them failed or
    cancelled: it waits for a retry of that job (then for its end)."""
    named = [_where(*row) for row in workflows.unsuccessful(waited, MAX_NAMED)]
    evidence.append(("to retry", "; ".join(named) or "none"))
    them = ", ".join(named) or "a job before it"
    return Blocker(
        Reason.WAITING,
        f"It was retried, but {them} ended without succeeding: it waits for an operator's retry of "
        f"that job, then for its end ({condition}). Retry it, or cancel this one.",
    )


def _where(job_id: int, job_type: str, status: str, worker: str | None) -> str:
    if status == "running":
        return f"job {job_id} ({job_type}, running on worker {worker})"
    if status == "needs_review":
        return f"job {job_id} ({job_type}, parked for review: an operator resolves or retries it)"
    return f"job {job_id} ({job_type}, {status})"
