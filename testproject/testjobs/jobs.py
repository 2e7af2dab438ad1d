"""Job types for the test suite. Each one misbehaves in a single, named way."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
import time
from typing import Any

from django.db import IntegrityError, connection, transaction

from django_jobs import (
    Backoff,
    JobCancelled,
    JobContext,
    PermanentError,
    RateLimitedError,
    Reconciliation,
    RetryableError,
    SkipJob,
    cancel,
    job,
)
from testproject.demo.client import call_provider, lookup_operation
from testproject.testjobs.models import BusinessRow, EffectLog, KeyedRun

FAST = Backoff(base=0.05, cap=0.2, jitter=0.5)


@job("test.noop", external=False)
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    pass


@job("test.noop_external", external=True)
def noop_external(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Does nothing, as a type whose effects may be outside the database: what a restore hold's
    check before each start costs (bench/drain.py --type)."""


@job("test.record", backoff=FAST, external=False)
def record(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Writes one business row keyed by the payload; a second write violates UNIQUE."""
    BusinessRow.objects.create(key=payload["key"], job_id=ctx.job_id, execution_id=ctx.execution_id)


@job("test.flaky", backoff=FAST, external=False)
def flaky(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Fails with a retryable error until attempt number payload["succeed_on"]."""
    if ctx.attempt < payload["succeed_on"]:
        raise RetryableError(f"temporary failure on attempt {ctx.attempt}", code="PROVIDER_5XX")


@job("test.permanent", external=False)
def permanent(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise PermanentError("the account does not exist", code="ENTITY_NOT_FOUND")


@job("test.coded_by_id", external=False)
def coded_by_id(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A handler that names the failing entity in its error code: a new code for every job."""
    raise PermanentError("no such order", code=f"ORDER_{ctx.job_id}_NOT_FOUND")


@job("test.poison", max_attempts=3, backoff=FAST, external=False)
def poison(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise ZeroDivisionError("division by zero in a corrupt file")


@job("test.skip", external=False)
def skip(ctx: JobContext, payload: dict[str, Any]) -> None:
    raise SkipJob("the document was deleted")


@job("test.rate_limited", backoff=FAST, external=False)
def rate_limited(ctx: JobContext, payload: dict[str, Any]) -> None:
    if ctx.attempt == 1:
        raise RateLimitedError("slow down", retry_after=payload["retry_after"])


@job("test.leaky", external=False)
def leaky(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Raises an error whose text carries secrets, as HTTP clients' errors often do."""
    raise PermissionError(
        "request failed: headers={'Authorization': 'Bearer abc.def.ghi-secret-token'} "
        "url=https://svc:hunter2@api.example.com/v1?api_key=AKIAIOSFODNN7EXAMPLE password=hunter2"
    )


@job("test.in_transaction", external=False)
def in_transaction(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Records whether the handler was started inside a transaction."""
    BusinessRow.objects.create(
        key=f"in_atomic:{ctx.job_id}:{connection.in_atomic_block}:{connection.get_autocommit()}",
        job_id=ctx.job_id,
        execution_id=ctx.execution_id,
    )


@job("test.sleep", backoff=FAST, external=False)
def sleep(ctx: JobContext, payload: dict[str, Any]) -> None:
    time.sleep(payload.get("seconds", 0.1))


VERSIONED_UPCASTERS = {1: lambda p: {**p, "v2": True}, 2: lambda p: {**p, "v3": True}}


@job("test.versioned", version=3, upcasters=VERSIONED_UPCASTERS, external=False)
def versioned(ctx: JobContext, payload: dict[str, Any]) -> None:
    BusinessRow.objects.create(
        key=f"versioned:{ctx.job_id}:{sorted(payload)}", job_id=ctx.job_id, execution_id=ctx.execution_id
    )


# ---- jobs for the lease, shutdown and crash tests -------------------------------------------


def _mark(ctx: JobContext, label: str) -> None:
    """Commit a row saying this execution reached ``label``: tests wait for it before acting."""
    BusinessRow.objects.create(
        key=f"{label}:{ctx.job_id}:{ctx.execution_id}", job_id=ctx.job_id, execution_id=ctx.execution_id
    )


@job("test.long", backoff=FAST, external=False)
def long(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Marks its start, works for payload["seconds"] in small steps, then marks its end."""
    _mark(ctx, "started")
    deadline = time.monotonic() + payload["seconds"]
    while time.monotonic() < deadline:
        time.sleep(0.02)
        ctx.raise_if_cancelled()
    _mark(ctx, "finished")


@job("test.checkpointed", backoff=FAST, external=False)
def checkpointed(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Processes payload["steps"] steps, one business row each, resuming from its checkpoint."""
    start = ctx.checkpoint["next"] if ctx.checkpoint else 0
    for step in range(start, payload["steps"]):
        # The row commits first, then the checkpoint: a crash in between re-runs this step,
        # and the UNIQUE key makes that re-run a no-op.
        BusinessRow.objects.get_or_create(
            key=f"step:{ctx.job_id}:{step}", defaults={"job_id": ctx.job_id, "execution_id": ctx.execution_id}
        )
        ctx.save_checkpoint({"next": step + 1})
        ctx.progress(step + 1, payload["steps"])
        time.sleep(payload.get("pause", 0.05))


@job("test.beating_forever", timeout=0.5, backoff=FAST, max_attempts=2, external=False)
def beating_forever(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Beats diligently but never finishes: its deadline must stop it."""
    while True:
        ctx.heartbeat()
        time.sleep(0.02)


@job("test.runaway", timeout=0.3, backoff=FAST, external=False)
def runaway(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Ignores its deadline entirely (a hung call): the heartbeat must stop covering it."""
    _mark(ctx, "started")
    time.sleep(payload["seconds"])
    _mark(ctx, "finished")


@job("test.unsafe", on_lost="needs_review")
def unsafe(ctx: JobContext, payload: dict[str, Any]) -> None:
    """An irreversible side effect without idempotency: never retried blindly."""
    _mark(ctx, "started")
    time.sleep(payload.get("seconds", 0))


@job("test.chaos", backoff=FAST, max_attempts=50, external=False)
def chaos(ctx: JobContext, payload: dict[str, Any]) -> None:
    """One business row per job, protected by UNIQUE: a re-run after a crash is a no-op."""
    time.sleep(payload.get("pause", 0.01))
    try:
        with transaction.atomic():
            BusinessRow.objects.create(
                key=f"chaos:{payload['n']}", job_id=ctx.job_id, execution_id=ctx.execution_id
            )
    except IntegrityError:
        pass  # an earlier execution already did it; completing is what is left to do


@job("test.statement_timeout", external=False)
def statement_timeout(ctx: JobContext, payload: dict[str, Any]) -> str:
    """Returns the statement_timeout of the connection handlers use."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return str(cursor.fetchone()[0])


@job("test.cancelled_query", max_attempts=1, external=False)
def cancelled_query(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A query the database cancels (``statement_timeout``): an OperationalError on a connection
    that stays sound, so the handler's own failure and not an outage."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = '20ms'")
        cursor.execute("SELECT pg_sleep(1)")


@job("test.traced", backoff=Backoff(base=0.05, cap=0.05, jitter=0), max_attempts=5, external=False)
def traced(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Works inside a span of its own (under its execution's), for ``payload["pause"]`` seconds,
    and fails with a retryable error, whose text holds a secret, until attempt
    ``payload["succeed_on"]`` (docs/operations/tracing.md). The baggage it sees is on its
    span, as ``baggage.NAME`` attributes."""
    from opentelemetry import baggage, trace

    with trace.get_tracer("testproject").start_as_current_span("charge card") as span:
        span.set_attributes({f"baggage.{name}": str(value) for name, value in baggage.get_all().items()})
        time.sleep(payload.get("pause", 0))
        if ctx.attempt < payload.get("succeed_on", 1):
            raise RetryableError(
                f"card network timed out on attempt {ctx.attempt} (postgres://shop:hunter2@db/prod)",
                code="PROVIDER_5XX",
            )


@job("test.tells_sentry", external=False)
def tells_sentry(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Reports a message to Sentry from inside the handler, as a handler's own error report would."""
    import sentry_sdk

    sentry_sdk.capture_message("the warehouse is short of stock")


@job("test.counted", backoff=FAST, max_attempts=50, external=False)
def counted(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Counts its executions outside the database, a line each in the file payload["log"]:
    a worker cut off from the database still counts what it ran."""
    with open(payload["log"], "a") as log:
        log.write(f"{ctx.job_id} {ctx.execution_id}\n")
    time.sleep(payload.get("pause", 0.01))


# ---- jobs for the idempotency tests -------------------------------------------------------------


class SimulatedCrash(BaseException):
    """Stands for a crash in in-process tests: no handler catches it, no outcome is written."""


def _crash_here(ctx: JobContext, payload: dict[str, Any], point: str) -> None:
    """Crash at ``point`` if the payload's ``crash_plan`` says so for this attempt.

    ``crash_plan[n]`` is where attempt n + 1 dies. By default the crash is a real SIGKILL of
    this very process, at the worst moment; ``crash_by="exception"`` simulates it in-process.
    """
    plan = payload.get("crash_plan", [])
    if ctx.attempt <= len(plan) and plan[ctx.attempt - 1] == point:
        if payload.get("crash_by") == "exception":
            raise SimulatedCrash(point)
        os.kill(os.getpid(), signal.SIGKILL)


@job("test.invoice", backoff=FAST, external=False)
def invoice(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A database-local effect recorded with a processed-effect key in the same transaction."""
    _crash_here(ctx, payload, "before_effect")
    with ctx.effect(f"invoice:order:{payload['order']}") as first_time:
        if first_time:
            EffectLog.objects.create(key=f"invoice:order:{payload['order']}", execution_id=ctx.execution_id)
    _crash_here(ctx, payload, "after_effect")


@job("test.charge", backoff=FAST, external=True)
def charge(ctx: JobContext, payload: dict[str, Any]) -> None:
    """An external effect made idempotent by a stable Idempotency-Key."""
    _crash_here(ctx, payload, "before_effect")
    call_provider(ctx, f"/operations/charge-{payload['order']}{payload.get('query', '')}", payload)
    _crash_here(ctx, payload, "after_effect")


def _reconcile_charge(ctx: JobContext, payload: dict[str, Any]) -> Reconciliation:
    try:
        found = lookup_operation(ctx, ctx.idempotency_key(), payload.get("lookup_query", ""))
    except RetryableError:
        return Reconciliation.UNKNOWN
    return Reconciliation.DONE if found is not None else Reconciliation.NOT_DONE


@job("test.reconciled_charge", backoff=FAST, reconcile=_reconcile_charge)
def reconciled_charge(ctx: JobContext, payload: dict[str, Any]) -> None:
    """An external effect whose ambiguous attempts are reconciled before being repeated."""
    if payload.get("timeout_before_send") and ctx.attempt == 1:
        raise RetryableError("connect timed out", code="NETWORK_TIMEOUT")
    call_provider(ctx, f"/operations/rcharge-{payload['order']}{payload.get('query', '')}", payload)


@job("test.unsafe_send", backoff=FAST, on_lost="needs_review")
def unsafe_send(ctx: JobContext, payload: dict[str, Any]) -> None:
    """An irreversible call without idempotency that got no answer: never retried blindly."""
    raise RetryableError("no answer after sending the transfer", code="NETWORK_TIMEOUT")


@job("test.lease_only", heartbeat=False, lease_timeout=0.3, max_attempts=1, external=False)
def lease_only(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Runs on its lease alone (no heartbeat): it must finish within lease_timeout."""
    time.sleep(payload["seconds"])


# ---- hostile handlers: whatever they do, the worker holds --------------------------------------


@job("test.async", backoff=FAST, external=False)
async def async_handler(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Written `async def`: it must run, not be marked completed unawaited."""
    await asyncio.sleep(0.01)
    await BusinessRow.objects.acreate(
        key=f"async:{ctx.job_id}:{ctx.attempt}", job_id=ctx.job_id, execution_id=ctx.execution_id
    )
    if payload.get("fail"):
        raise RetryableError("async failure", code="ASYNC_FAILED")


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("describing this error fails too")


class _BadCode:
    def __str__(self) -> str:
        raise RuntimeError("even str() of this code fails")


def _hostile_exception(kind: str) -> BaseException:
    """The odd things a handler (or a library under it) raises."""
    return {
        "nul": RetryableError("provider said \x00\x00 and then \ud800 garbage"),
        "long_code": RetryableError("long code", code="E" * 150),
        "object_code": RetryableError("code of an odd type", code=_BadCode()),  # type: ignore[arg-type]
        "int_code": PermanentError("a numeric code", code=503),  # type: ignore[arg-type]
        "inf_retry": RateLimitedError("come back never", retry_after=math.inf),
        "nan_retry": RateLimitedError("come back whenever", retry_after=math.nan),
        "huge_retry": RateLimitedError("come back in 3e12 years", retry_after=1e20),
        "huge_error": RetryableError("x" * 5_000_000),
        "system_exit": SystemExit(3),
        "keyboard_interrupt": KeyboardInterrupt(),
        "cancelled_error": asyncio.CancelledError(),
        "unprintable": _Unprintable(),
        "generator_exit": GeneratorExit(),
    }[kind]


@job("test.hostile", backoff=FAST, max_attempts=3, external=False)
def hostile(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Raises the hostile exception its payload names, on every attempt."""
    raise _hostile_exception(payload["kind"])


@job("test.hostile_once", backoff=Backoff(base=60, cap=60, jitter=0), max_attempts=3, external=False)
def hostile_once(ctx: JobContext, payload: dict[str, Any]) -> None:
    """As test.hostile, with a retry a minute later: a test sees exactly one attempt."""
    raise _hostile_exception(payload["kind"])


#: Set by a test to let blocked handlers return; a handler in a call without timeout otherwise.
UNBLOCK = threading.Event()


@job("test.blocked", priority=10, external=False)
def blocked(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Stuck in a call without a timeout (until the test unblocks it)."""
    _mark(ctx, "started")
    UNBLOCK.wait(payload.get("seconds", 60))


@job("test.hung", timeout=0.3, backoff=FAST, max_attempts=2, external=False)
def hung(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Ignores its deadline in a call without a timeout."""
    _mark(ctx, "started")
    UNBLOCK.wait(payload.get("seconds", 60))


@job("test.cancel_then_fail", backoff=FAST, external=False)
def cancel_then_fail(ctx: JobContext, payload: dict[str, Any]) -> None:
    """An operator asks to cancel while the job runs; the job then fails with a retryable error."""
    cancel(ctx.job_id, actor="ops", reason="stop it")
    raise RetryableError("the provider is down", code="PROVIDER_5XX")


@job("test.quiet_long", heartbeat=False, lease_timeout=30, external=False)
def quiet_long(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Runs on its lease alone, and stops when cancelled."""
    _mark(ctx, "started")
    deadline = time.monotonic() + payload["seconds"]
    while time.monotonic() < deadline:
        time.sleep(0.02)
        ctx.raise_if_cancelled()
    _mark(ctx, "finished")


@job("test.atomic_side_writes", backoff=FAST, external=False)
def atomic_side_writes(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Reports progress and a checkpoint from inside its own transaction, then works on."""
    with transaction.atomic():
        BusinessRow.objects.create(
            key=f"atomic:{ctx.job_id}", job_id=ctx.job_id, execution_id=ctx.execution_id
        )
        ctx.progress(1, 2)
        ctx.save_checkpoint({"step": 1})
        ctx.heartbeat()
        time.sleep(payload["seconds"])


@job("test.deadline", timeout=120, external=False)
def deadline(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Records the deadline it was given (in the database's time)."""
    assert ctx.deadline is not None
    key = f"deadline:{ctx.job_id}:{ctx.deadline.timestamp()}"
    BusinessRow.objects.create(key=key, job_id=ctx.job_id, execution_id=ctx.execution_id)


@job("test.db_user", backoff=FAST, max_attempts=3, external=False)
def db_user(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A short job that needs the database: a crowded server refuses it. Idempotent: an
    execution whose outcome was lost with the connection runs again, and writes nothing new."""
    with transaction.atomic():
        BusinessRow.objects.get_or_create(
            key=f"db_user:{payload['n']}", defaults={"job_id": ctx.job_id, "execution_id": ctx.execution_id}
        )
        time.sleep(payload.get("pause", 0.01))


@job("test.effect_row", backoff=FAST, max_attempts=50, external=False)
def effect_row(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A business row written once through ctx.effect, the row itself UNIQUE as a witness."""
    time.sleep(payload.get("pause", 0.01))
    with ctx.effect(f"effect_row:{payload['n']}") as first_time:
        if first_time:
            BusinessRow.objects.create(
                key=f"effect:{payload['n']}", job_id=ctx.job_id, execution_id=ctx.execution_id
            )


@job("test.sleep_forever", timeout=2, backoff=FAST, max_attempts=2, external=False)
def sleep_forever(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Stuck for good in a call that ignores everything: only a killed process stops it."""
    _mark(ctx, "started")
    time.sleep(10**6)


@job("test.kills_its_process", backoff=FAST, external=False)
def kills_its_process(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Dies like a segfault or the OOM killer would kill it, on its first attempt."""
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    _mark(ctx, "survived")


@job("test.bad_reports", backoff=FAST, external=False)
def bad_reports(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Saves a checkpoint (and reports progress) the database could not store as given."""
    if payload["what"] == "checkpoint":
        ctx.save_checkpoint(payload["good"])
        huge = {"rows": "x" * (65 * 1024)} if payload["bad"] == "huge" else {"ratio": math.nan, "when": time}
        ctx.save_checkpoint(huge)
    else:
        ctx.progress(math.nan if payload["bad"] == "nan" else "half", 10)


@job("test.payment", sensitive=("card", "cvc"), external=False)
def payment(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Carries a card in its payload: the console masks it for people without the permission."""


@job(
    "test.keyed",
    backoff=FAST,
    concurrency_key=lambda payload: payload.get("key"),
    concurrency_limit=2,
    external=False,
)
def keyed(ctx: JobContext, payload: dict[str, Any]) -> None:
    """At most two per key at once; records when it ran, for the tests to count overlaps."""
    started = time.time()
    time.sleep(payload.get("seconds", 0.0))
    KeyedRun.objects.create(key=payload["key"], job_id=ctx.job_id, started=started, finished=time.time())


@job("test.keyed_once", backoff=FAST, external=False)
def keyed_once(ctx: JobContext, payload: dict[str, Any]) -> None:
    """No key of its own: enqueue() gives one, and the default limit of one applies."""


@job("test.rated", rate_limit="20/s", external=False)
def rated(ctx: JobContext, payload: dict[str, Any]) -> None:
    """At most 20 starts in any second, across all workers."""


# ---- jobs that mark their external calls ------------------------------------------------------


def _reach(ctx: JobContext, payload: dict[str, Any], point: str) -> None:
    """Commit a row saying the execution reached ``point``; on the first attempt, stay there
    if the payload says so (a test kills the worker meanwhile)."""
    _mark(ctx, point)
    if payload.get("hang") == point and ctx.attempt == 1:
        time.sleep(payload.get("seconds", 60))


def _marked_charge(ctx: JobContext, payload: dict[str, Any]) -> None:
    """One call to a provider without idempotency, marked; its effect is a row per attempt."""
    _reach(ctx, payload, "before_call")
    if payload.get("fail_before_call") and ctx.attempt == 1:
        raise RetryableError("could not build the request", code=payload["fail_before_call"])
    with ctx.external_call("charge"):
        _reach(ctx, payload, "in_call")
        if payload.get("fail_in_call") and ctx.attempt == 1:
            raise RetryableError("no answer from the provider", code=payload["fail_in_call"])
        key = f"provider_charge:{ctx.job_id}:{ctx.attempt}"
        BusinessRow.objects.create(key=key, job_id=ctx.job_id, execution_id=ctx.execution_id)
        _reach(ctx, payload, "charged")
    if payload.get("fail_after_call") and ctx.attempt == 1:
        raise RetryableError("the receipt could not be stored", code=payload["fail_after_call"])


@job("test.marked_charge", backoff=FAST, on_lost="needs_review", external_calls=("charge", "refund"))
def marked_charge(ctx: JobContext, payload: dict[str, Any]) -> None:
    """An irreversible call (on_lost="needs_review"), marked: only a loss inside it needs a human."""
    if payload.get("undeclared"):
        with ctx.external_call("transfer"):
            pass
    _marked_charge(ctx, payload)


def _charged(ctx: JobContext, payload: dict[str, Any]) -> Reconciliation:
    found = BusinessRow.objects.filter(key__startswith=f"provider_charge:{ctx.job_id}:").exists()
    return Reconciliation.DONE if found else Reconciliation.NOT_DONE


@job("test.marked_reconciled", backoff=FAST, external_calls=("charge",), reconcile=_charged)
def marked_reconciled(ctx: JobContext, payload: dict[str, Any]) -> None:
    """The same call, with a reconcile that asks whether the charge happened."""
    _marked_charge(ctx, payload)


@job("test.ticked", external=False)
def ticked(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Fired by the schedules of the scheduling tests; the tick rows and jobs are the record."""
    if payload.get("sleep"):
        time.sleep(float(payload["sleep"]))


# ---- a provider outside the database, for the restore tests -----------------------------------
# Its record is a file named in the payload: one line per call, the call's idempotency key. A
# restore of the database cannot take a line back, as it cannot take back a charge.


def _provider_record(payload: dict[str, Any]) -> list[str]:
    try:
        with open(payload["record"], encoding="utf-8") as record:
            return record.read().splitlines()
    except FileNotFoundError:
        return []


def _provider_call(ctx: JobContext, payload: dict[str, Any]) -> None:
    with open(payload["record"], "a", encoding="utf-8") as record:
        record.write(ctx.idempotency_key(anchor=payload["operation"]) + "\n")
        record.flush()
        os.fsync(record.fileno())


def _provider_knows(ctx: JobContext, payload: dict[str, Any]) -> Reconciliation:
    key = ctx.idempotency_key(anchor=payload["operation"])
    try:
        known = _provider_record(payload)
    except OSError:  # the provider cannot answer
        return Reconciliation.UNKNOWN
    return Reconciliation.DONE if key in known else Reconciliation.NOT_DONE


@job("test.provider_charge", backoff=FAST, reconcile=_provider_knows)
def provider_charge(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A charge at a provider that can say, by idempotency key, whether it happened."""
    _provider_call(ctx, payload)


@job("test.provider_notice", backoff=FAST, external=True)
def provider_notice(ctx: JobContext, payload: dict[str, Any]) -> None:
    """A message sent through a provider that keeps no record to ask: no reconcile."""
    _provider_call(ctx, payload)


@job("test.step", backoff=FAST, external=False)
def step(ctx: JobContext, payload: dict[str, Any]) -> Any:
    """A workflow's step: one business row per key (a re-run after a crash adds none), fails
    when told, and returns what it was given plus what the step before it returned
    (``parent``), when told to read it."""
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    _once(ctx, payload["key"])
    if payload.get("fail"):
        raise PermanentError("told to fail", code="STEP_FAILED")
    parent = ctx.parent_result() if payload.get("read_parent") else None
    return {"n": payload.get("n"), "parent": parent}


@job("test.summarise", backoff=FAST, external=False)
def summarise(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """A workflow's callback: one business row, and the summary of the jobs it waited for and
    how many results it read."""
    upstream = ctx.upstream()
    read = sum(1 for _ in upstream.results())
    _once(ctx, payload["key"])
    return {"summary": upstream.summary(), "read": read}


def _once(ctx: JobContext, key: str) -> None:
    try:
        with transaction.atomic():
            BusinessRow.objects.create(key=key, job_id=ctx.job_id, execution_id=ctx.execution_id)
    except IntegrityError:
        pass  # an earlier execution of this job did it


# ---- the state machine's model (tests/model) --------------------------------------------------

#: What the next execution of a job of the model's types does, by job id (taken when it runs):
#: complete, retry, ambiguous (a retryable error whose code says the effect may have happened),
#: permanent, skip, cancelled. A job with no entry completes.
MODEL_SCRIPT: dict[int, str] = {}
#: What a reconcile of the model's reconcilable type answers, by job id: done, not_done, unknown.
MODEL_RECONCILE: dict[int, str] = {}
#: Each start of a handler of the model's types: (job id, type), in order.
MODEL_STARTS: list[tuple[int, str]] = []
_MODEL_BACKOFF = Backoff(base=0.01, cap=0.01, jitter=0)


def _scripted(ctx: JobContext, payload: dict[str, Any]) -> dict[str, int]:
    MODEL_STARTS.append((ctx.job_id, ctx.type))
    outcome = MODEL_SCRIPT.pop(ctx.job_id, "complete")
    if outcome == "retry":
        raise RetryableError("told to retry", code="PROVIDER_5XX")
    if outcome == "ambiguous":
        raise RetryableError("told to time out", code="NETWORK_TIMEOUT")
    if outcome == "permanent":
        raise PermanentError("told to fail", code="STEP_FAILED")
    if outcome == "skip":
        raise SkipJob("told to skip")
    if outcome == "cancelled":
        raise JobCancelled("told to stop")
    if outcome == "sleep":  # a durable sleep: ends the execution, pending for an hour
        ctx.sleep(3600)
    if outcome == "wait":  # a durable wait for signal "go" (the model's signal rule sends it)
        ctx.wait_for("go", timeout=3600)
    return {"job": ctx.job_id}


def _model_reconcile(ctx: JobContext, payload: dict[str, Any]) -> Reconciliation:
    return Reconciliation(MODEL_RECONCILE.pop(ctx.job_id, "not_done"))


@job("test.model", backoff=_MODEL_BACKOFF, max_attempts=3, external=False)
def model_plain(ctx: JobContext, payload: dict[str, Any]) -> dict[str, int]:
    """The model's job inside the database: does what MODEL_SCRIPT says."""
    return _scripted(ctx, payload)


@job("test.model_review", backoff=_MODEL_BACKOFF, max_attempts=3, on_lost="needs_review", external=True)
def model_review(ctx: JobContext, payload: dict[str, Any]) -> dict[str, int]:
    """The model's job that is parked when an execution may have done its effect (so it acts
    outside the database, and cannot reconcile)."""
    return _scripted(ctx, payload)


@job(
    "test.model_reconciled", backoff=_MODEL_BACKOFF, max_attempts=3, reconcile=_model_reconcile, external=True
)
def model_reconciled(ctx: JobContext, payload: dict[str, Any]) -> dict[str, int]:
    """The model's job outside the database that asks its provider (MODEL_RECONCILE)."""
    return _scripted(ctx, payload)


# The durable job types live in their own module; importing it registers them with these.
from testproject.testjobs import durable_jobs  # noqa: E402, F401
