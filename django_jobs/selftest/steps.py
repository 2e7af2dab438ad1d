"""The steps of a run that need no signal: throughput, retries, claim latency, and at the end
the check that every effect happened once.

- Throughput: ``Plan.jobs`` jobs enqueued at once must all complete.
- Retries: jobs that fail their first attempt (retryable) must complete on their second; one
  that fails for good must fail at once, never retried; one that always fails must fail when
  its attempts are spent; both keep their error code.
- Claim latency: jobs enqueued one at a time while the workers are idle, from the enqueue's
  commit to the claim.
- Effects: each job that applies an effect has its key in the ledger, and exactly one
  execution applied it, however many ran.
"""

from __future__ import annotations

import functools
from collections import Counter

from django.db.models import Max, Min

from django_jobs.enqueueing import enqueue, enqueue_many
from django_jobs.models import Job, JobEvent, ProcessedEffect
from django_jobs.selftest.harness import GuaranteeBroken, Harness
from django_jobs.selftest.jobs import (
    EFFECT,
    EXHAUSTED,
    FLAKY,
    MAX_ATTEMPTS,
    ON_PURPOSE,
    PERMANENT,
    applied_key,
    effect_key,
)
from django_jobs.states import EventKind, JobStatus

#: Jobs that fail their first attempt on purpose.
FLAKY_JOBS = 10
#: Jobs enqueued one at a time to measure the claim latency.
LATENCY_SAMPLES = 20


def throughput(run: Harness) -> None:
    n, queue = run.plan.jobs, run.plan.queue
    jobs = enqueue_many(EFFECT, [{"run": run.run_id, "n": i} for i in range(n)], queue=queue)
    ids = [job.id for job in jobs]
    run.with_effect += ids
    run.say(f"enqueued {n} jobs ({EFFECT}) in queue {queue!r}")
    run.until(lambda: run.all_finished(ids), f"the {n} jobs to finish")
    rows = list(Job.objects.filter(id__in=ids).values("id", "status", "worker_id"))
    failed = [row for row in rows if row["status"] != JobStatus.COMPLETED]
    if failed:
        raise GuaranteeBroken(
            f"{len(failed)} of the {n} jobs did not complete (job {failed[0]['id']}: {failed[0]['status']})"
        )
    span = Job.objects.filter(id__in=ids).aggregate(first=Min("created_at"), last=Max("finished_at"))
    seconds = float((span["last"] - span["first"]).total_seconds())
    run.figures.throughput = n / max(seconds, 1e-6)
    shares = Counter(row["worker_id"] for row in rows)
    by = ", ".join(f"{w.name} {shares[w.worker_id]}" for w in run.workers.values())
    run.say(f"  all {n} completed in {seconds:.2f} s: {run.figures.throughput:,.0f} jobs/s ({by})")


def retries(run: Harness) -> None:
    queue, run_id = run.plan.queue, run.run_id
    flaky = [
        j.id for j in enqueue_many(FLAKY, [{"run": run_id, "n": i} for i in range(FLAKY_JOBS)], queue=queue)
    ]
    permanent = enqueue(PERMANENT, {"run": run_id}, queue=queue).id
    exhausted = enqueue(EXHAUSTED, {"run": run_id}, queue=queue, max_attempts=2).id
    run.with_effect += flaky
    run.say(
        f"enqueued {FLAKY_JOBS} jobs that fail their first attempt (retryable), 1 that fails for "
        "good, 1 that fails every attempt (max_attempts 2)"
    )
    ids = [*flaky, permanent, exhausted]
    run.until(lambda: run.all_finished(ids), "those jobs to finish")
    rows = {
        r["id"]: r
        for r in Job.objects.filter(id__in=ids).values("id", "status", "attempts", "last_error_code")
    }
    events = Counter(
        JobEvent.objects.filter(
            job_id__in=ids, kind__in=[EventKind.RETRY_SCHEDULED, EventKind.RECOVERED]
        ).values_list("job_id", "kind")
    )
    expected = {job_id: (JobStatus.COMPLETED, 2, 1) for job_id in flaky}
    expected[permanent] = (JobStatus.FAILED, 1, 0)
    expected[exhausted] = (JobStatus.FAILED, 2, 1)
    lost = [job_id for job_id in ids if events[(job_id, EventKind.RECOVERED)]]
    for job_id, (status, attempts, times) in expected.items():
        row, retried = rows[job_id], events[(job_id, EventKind.RETRY_SCHEDULED)]
        # A job whose lease was lost on the way (its worker stalled for longer than a lease)
        # had an attempt more, or a retry less: only where it ended is checked then.
        found = (row["status"],) if job_id in lost else (row["status"], row["attempts"], retried)
        if found != (status, attempts, times)[: len(found)]:
            raise GuaranteeBroken(
                f"job {job_id} should be {status} after {attempts} attempt(s) and {times} retry(ies); "
                f"it is {row['status']} after {row['attempts']} and {retried}"
            )
        if status == JobStatus.FAILED and job_id not in lost and row["last_error_code"] != ON_PURPOSE:
            raise GuaranteeBroken(f"job {job_id} failed with code {row['last_error_code']}, not {ON_PURPOSE}")
    if lost:
        run.say(
            f"  {len(lost)} of them lost their lease on the way (a worker stalled for longer than "
            f"{run.plan.lease:g} s) and were recovered"
        )
    run.say(
        f"  the {FLAKY_JOBS} were retried once and completed on their second attempt; the one that "
        "fails for good failed at once, never retried; the last failed once its 2 attempts were "
        f"spent; both kept their error code ({ON_PURPOSE})"
    )


def claim_latency(run: Harness) -> None:
    ids = []
    for i in range(LATENCY_SAMPLES):
        job_id = enqueue(EFFECT, {"run": run.run_id, "ping": i}, queue=run.plan.queue).id
        ids.append(job_id)
        run.until(functools.partial(run.all_finished, [job_id]), f"job {job_id} to finish")
    run.with_effect += ids
    rows = Job.objects.filter(id__in=ids).values_list("started_at", "available_at")
    run.figures.claim_latency = [(started - due).total_seconds() for started, due in rows if started]
    run.say(
        f"claim latency, idle workers ({LATENCY_SAMPLES} jobs enqueued one at a time): "
        + run.figures.latency()
    )


def effects(run: Harness) -> None:
    ids = sorted(set(run.with_effect))
    keys = {effect_key(run.run_id, job_id): job_id for job_id in ids}
    done = set(ProcessedEffect.objects.filter(key__in=keys).values_list("key", flat=True))
    missing = [job_id for key, job_id in keys.items() if key not in done]
    if missing:
        raise GuaranteeBroken(f"{len(missing)} job(s) completed without their effect: job {missing[0]}, …")
    applied: Counter[int] = Counter()
    candidates = {applied_key(run.run_id, j, a): j for j in ids for a in range(1, MAX_ATTEMPTS + 1)}
    for key in ProcessedEffect.objects.filter(key__in=candidates).values_list("key", flat=True):
        applied[candidates[key]] += 1
    twice = [job_id for job_id in ids if applied[job_id] != 1]
    if twice:
        raise GuaranteeBroken(
            f"the effect of job {twice[0]} was applied {applied[twice[0]]} time(s), not once "
            f"({len(twice)} such job(s))"
        )
    reran = Job.objects.filter(id__in=ids, attempts__gt=1).count()
    run.say(
        f"effects: {len(ids)} jobs, each applied once ({len(done) + sum(applied.values())} ledger keys); "
        f"{reran} of them ran more than once (a retry, a SIGKILL, a SIGSTOP) and found their effect done"
    )
