"""The self-test's job types, the keys their effects leave in the effect ledger, and the names
a run gives its workers.

These types are registered only in the processes of a self-test (``manage.py jobsselftest``
and the workers it starts, which import this module), never by the app's autodiscovered
``django_jobs.jobs``: a worker claims only the types it knows, so the project's own workers —
``runjobs`` serves every queue unless told otherwise — leave the self-test's jobs alone, and the
self-test knows which process runs each of its jobs (it has to, to kill that one). They name
no queue (the project's ``QUEUES`` check would hold them to it); the self-test enqueues them
into its own.

The effect of a job is a row of django_jobs' own effect ledger (``ProcessedEffect``), so the
self-test needs no table of the project's: the job's key (:func:`effect_key`), taken with
``ctx.effect()`` exactly as a handler guards its business write, and, inside that block, a
second key that says which attempt applied it (:func:`applied_key`). A job whose effect
happened once has one applied key, whatever its attempts; a second execution that applied it
again would leave a second.
"""

from __future__ import annotations

import time
from typing import Any

from django_jobs import effects
from django_jobs.backoff import Backoff
from django_jobs.errors import PermanentError, RetryableError
from django_jobs.registry import job
from django_jobs.runtime.context import JobContext

PREFIX = "django_jobs.selftest."
#: Applies its effect and completes.
EFFECT = PREFIX + "effect"
#: Applies its effect, then fails its first attempt with a retryable error: the retry finds
#: the effect done.
FLAKY = PREFIX + "flaky"
#: Fails for good at once: never retried.
PERMANENT = PREFIX + "permanent"
#: Fails with a retryable error every time: ends failed once its attempts are spent.
EXHAUSTED = PREFIX + "exhausted"
#: Applies its effect, then, on its first attempt, holds its slot (proving itself alive) until
#: it learns that it lost the job or ``seconds`` pass: the job the self-test kills or freezes.
HOLD = PREFIX + "hold"
#: The marker of a run: holds its queue (``lock``); scheduled far ahead, never meant to run.
RUN = PREFIX + "run"
TYPES = (EFFECT, FLAKY, PERMANENT, EXHAUSTED, HOLD, RUN)
#: The types whose jobs apply an effect.
WITH_EFFECT = (EFFECT, FLAKY, HOLD)

#: Attempts of every type: enough for a recovery and a retry.
MAX_ATTEMPTS = 3
#: Retries come back at once: the run waits for them.
QUICK = Backoff(base=0.05, cap=0.2, jitter=0.0)
#: The error code of the failures the self-test causes on purpose.
ON_PURPOSE = "SELFTEST"
#: The ledger's keys of the self-test start with this (then the run, then the job).
KEY_PREFIX = "django_jobs.selftest:"


#: The self-test's workers, in the order a run starts them: two at first, then a third to take
#: over from the one it freezes.
WORKER_NAMES = ("A", "B", "C")


def worker_id(run: str, name: str) -> str:
    """The id a run's worker ``name`` goes by (in its jobs, their events, the live workers)."""
    return f"jobsselftest-{run}-{name}"


def effect_key(run: str, job_id: int) -> str:
    """The key of job ``job_id``'s effect: the same for every attempt."""
    return f"{KEY_PREFIX}{run}:{job_id}"


def applied_key(run: str, job_id: int, attempt: int) -> str:
    """The key the effect of ``job_id`` writes when attempt ``attempt`` applies it."""
    return f"{KEY_PREFIX}{run}:{job_id}:applied:{attempt}"


def keys_of(run: str, job_id: int, attempts: int) -> list[str]:
    """Every key a job of ``run`` may have written in ``attempts`` attempts."""
    return [effect_key(run, job_id), *(applied_key(run, job_id, a) for a in range(1, attempts + 1))]


def _apply(ctx: JobContext, payload: dict[str, Any]) -> bool:
    """The job's effect, at most once; whether this execution applied it."""
    run = str(payload["run"])
    with ctx.effect(effect_key(run, ctx.job_id)) as first_time:
        if first_time:
            with effects.once(applied_key(run, ctx.job_id, ctx.attempt), job_id=ctx.job_id):
                pass
    return first_time


@job(EFFECT, max_attempts=MAX_ATTEMPTS, backoff=QUICK, external=False)
def apply_effect(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    return {"applied": _apply(ctx, payload), "attempt": ctx.attempt}


@job(FLAKY, max_attempts=MAX_ATTEMPTS, backoff=QUICK, external=False)
def fail_once(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    applied = _apply(ctx, payload)
    if ctx.attempt == 1:
        raise RetryableError("the self-test's first attempt fails on purpose", code=ON_PURPOSE)
    return {"applied": applied, "attempt": ctx.attempt}


@job(PERMANENT, max_attempts=MAX_ATTEMPTS, backoff=QUICK, external=False)
def fail_for_good(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise PermanentError("the self-test fails this job for good, on purpose", code=ON_PURPOSE)


@job(EXHAUSTED, max_attempts=MAX_ATTEMPTS, backoff=QUICK, external=False)
def fail_every_time(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise RetryableError("the self-test fails every attempt of this job, on purpose", code=ON_PURPOSE)


@job(HOLD, max_attempts=MAX_ATTEMPTS, backoff=QUICK, external=False)
def hold(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    applied = _apply(ctx, payload)
    if ctx.attempt == 1:
        ends = time.monotonic() + float(payload["seconds"])
        while time.monotonic() < ends:
            # Extends the lease as any long handler would, and raises LeaseLost once the job
            # is another execution's: a frozen worker that wakes up learns it here.
            ctx.heartbeat()
            time.sleep(0.05)
    return {"applied": applied, "attempt": ctx.attempt}


@job(RUN, max_attempts=1, external=False)
def run_marker(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Nothing to do: the job only marks a run, and is removed with it."""
