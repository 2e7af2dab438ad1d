"""Durable job types for the test suite: a scripted one (each payload says its steps, sleeps and
waits, and where an attempt dies) and the order flow the HTTP tests drive through views.py.

Every step writes one ``EffectLog`` row (a table with no constraint of its own): a test counts
the rows of a key to prove that a step's business effect happened exactly once.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
from typing import Any

from django.db import transaction

from django_jobs import Backoff, JobContext, SignalTimeout, job
from testproject.testjobs.models import EffectLog

FAST = Backoff(base=0.05, cap=0.2, jitter=0.5)


class DurableCrash(BaseException):
    """Stands for a crash in in-process tests: no handler catches it, no outcome is written."""


def crash_at(ctx: JobContext, payload: dict[str, Any], point: str) -> None:
    """Die at ``point`` if ``crash_plan[attempt - 1]`` names it: by SIGKILL of this very process
    (a real worker), or, with ``crash_by="exception"``, by :class:`DurableCrash`."""
    plan = payload.get("crash_plan", [])
    if ctx.attempt <= len(plan) and plan[ctx.attempt - 1] == point:
        if payload.get("crash_by") == "exception":
            raise DurableCrash(point)
        os.kill(os.getpid(), signal.SIGKILL)


def effect(ctx: JobContext, payload: dict[str, Any], name: str) -> str:
    """A step's business effect: one row, then perhaps a crash inside the step's transaction."""
    EffectLog.objects.create(key=f"{payload['run']}:{name}", execution_id=ctx.execution_id)
    crash_at(ctx, payload, f"inside:{name}")
    return name


@job("test.durable", max_attempts=40, backoff=FAST, external=False)
def scripted(ctx: JobContext, payload: dict[str, Any]) -> list[Any]:
    """Runs ``payload["script"]``: ``["step", name]``, ``["sleep", seconds]``,
    ``["sleep_until", iso]``, ``["wait", name, timeout]``, ``["bad_step", name]`` (a result that
    is not JSON), ``["secret_step", name]`` (a result with an API key); before each entry,
    ``crash_plan`` may kill the attempt (``before:<name>``)."""
    done: list[Any] = []
    for entry in payload["script"]:
        kind, name = entry[0], entry[1]
        crash_at(ctx, payload, f"before:{name}")
        if kind == "step":
            done.append(ctx.step(name, effect, ctx, payload, name))
        elif kind == "secret_step":  # a result with a secret in it, for the console's mask
            done.append(ctx.step(name, lambda: {"charge": 7, "api_key": "sk_live_51Hx"}))
        elif kind == "bad_step":
            done.append(ctx.step(name, lambda: {1, 2}))
        elif kind == "sleep":  # "inf" and "nan" stand for the floats JSON cannot carry
            ctx.sleep(float(name) if name in ("inf", "nan") else name)
        elif kind == "sleep_in_a_transaction":
            with transaction.atomic():
                done.append(ctx.step(f"{name}-step", effect, ctx, payload, f"{name}-step"))
                ctx.sleep(60)
        elif kind == "sleep_until":
            ctx.sleep(until=dt.datetime.fromisoformat(name))
        elif kind == "wait":
            try:
                done.append(ctx.wait_for(name, timeout=entry[2]))
            except SignalTimeout:
                done.append("timed out")
    return done


@job("test.durable_external", max_attempts=5, backoff=FAST, external=True)
def scripted_external(ctx: JobContext, payload: dict[str, Any]) -> list[Any]:
    """:func:`scripted`, of a type whose effects leave the database (a provider's): what a
    restore hold keeps from starting."""
    return scripted(ctx, payload)


@job("test.order_flow", max_attempts=5, backoff=FAST, external=False)
def order_flow(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Charge → wait for ``paid`` → ship → sleep → e-mail (views.py enqueues and signals it)."""
    ctx.step("charge", effect, ctx, payload, "charge")
    try:
        paid = ctx.wait_for("paid", timeout=payload.get("timeout", 60))
    except SignalTimeout:
        ctx.step("cancel", effect, ctx, payload, "cancel")
        return {"cancelled": True}
    ctx.step("ship", effect, ctx, payload, "ship")
    ctx.sleep(payload.get("sleep", 3))
    ctx.step("email", effect, ctx, payload, "email")
    return {"paid": paid}


@job("test.durable_steps", external=False)
def durable_steps(ctx: JobContext, payload: dict[str, Any]) -> int:
    """``payload["steps"]`` steps that do nothing but be recorded, a sleep of ``payload["pause"]``
    seconds after each one but the last when it is given (bench/durable_cost.py)."""
    total = 0
    for n in range(payload["steps"]):
        total += ctx.step(f"s{n}", int, n)
        if payload.get("pause") and n < payload["steps"] - 1:
            ctx.sleep(payload["pause"], name=f"pause{n}")
    return total
