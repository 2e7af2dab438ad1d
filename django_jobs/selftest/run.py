"""A whole self-test run: the refusals, the queue held, the steps in order, and the clean-up
that follows whatever happened.

1. Refuse (``preflight``), or hold the queue (``lock``).
2. Start workers A and B: they serve only the run's queue (``harness``).
3. Throughput, retries, claim latency (``steps``).
4. SIGKILL, then SIGSTOP (``crashes``).
5. Effects: each applied once (``steps``).
6. Stop every worker left, and remove what the run wrote (``cleanup``), or keep it.

A refusal raises ``preflight.Refused`` with nothing written; a guarantee that did not hold
raises ``GuaranteeBroken``. Once the queue is held, the clean-up runs on every way out — a
failure, a Ctrl-C, a SIGTERM — and says what it removed, or what is left and how to remove it.
"""

from __future__ import annotations

from django_jobs.selftest import cleanup, crashes, lock, preflight, steps
from django_jobs.selftest.figures import Figures
from django_jobs.selftest.harness import GuaranteeBroken, Harness, Plan, Say
from django_jobs.selftest.worker_role import heartbeat_for


def run(plan: Plan, say: Say) -> Figures:
    """Run every step of the self-test as ``plan`` says, saying each; what it measured."""
    preflight.check(plan.queue)
    harness = Harness(plan, say)
    marker = lock.take(plan.queue, harness.run_id)
    say(
        f"run {harness.run_id}: queue {plan.queue!r} is empty and now held by this run (job {marker.id}); "
        f"lease {plan.lease:g} s, heartbeat every {heartbeat_for(plan.lease):g} s"
    )
    finished = False
    try:
        harness.start("A", "B")
        steps.throughput(harness)
        steps.retries(harness)
        steps.claim_latency(harness)
        survivor = crashes.kill(harness)
        crashes.freeze(harness, survivor)
        steps.effects(harness)
        finished = True
    finally:
        harness.discard_workers()
        left = _clean_up(harness)
        if left is not None and finished:
            raise GuaranteeBroken(left)
    say(harness.figures.line(plan.lease))
    return harness.figures


def _clean_up(harness: Harness) -> str | None:
    """Remove what the run wrote (or keep it); what could not be done, if anything. Never
    raises: it runs after a failure, or an interruption, whose error must be the one shown."""
    queue, run_id = harness.plan.queue, harness.run_id
    try:
        if harness.plan.keep:
            jobs, keys = cleanup.keep(queue, run_id)
            harness.say(
                f"kept run {run_id}: {jobs} job(s) and {keys} ledger key(s); "
                + cleanup.how_to_find(queue, run_id)
            )
            return None
        harness.say(cleanup.described(cleanup.remove(queue, [run_id])))
    except Exception as exc:  # the database may be what failed: say what is left, and how to remove it
        left = (
            f"could not remove what run {run_id} wrote ({exc}); remove it with: "
            f"manage.py jobsselftest --clean --queue {queue}"
        )
        harness.say(left)
        return left
    return None
