"""What a person does to a durable job (docs/durable-jobs.md) — wake a sleeping one now, send a
signal to one — from the console or from Python, audited as a retry is
(:mod:`django_jobs.console.actions`): the guarded write of
:mod:`django_jobs.transitions.durable_operator` with its ``JobEvent`` (who and why), and an
admin ``LogEntry`` when the actor is a Django user, in one transaction of the jobs database.

Both ask for the ``signal_job`` permission in the console: a signal is business input (a
"paid" that never came from the provider ships an order), and a wake skips a wait the
handler chose.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django_jobs.console import audit as consolelog
from django_jobs.console.actions import _job, _named, actor_name, check_reason, user_of
from django_jobs.console.seen import Shown
from django_jobs.durable_rules import signal_json
from django_jobs.reads import durable as durable_reads
from django_jobs.transitions import ActionRefused
from django_jobs.transitions import durable_operator as transitions

if TYPE_CHECKING:
    from django_jobs.console.actions import Actor

#: The codename of the permission both actions ask for in the console.
PERMISSION = "signal_job"


def wake(job_id: int, *, reason: str, actor: Actor | None = None, seen: Shown | None = None) -> str:
    """End the sleep of a sleeping durable job now: it is due now, and its handler's replay
    goes on past the sleep. Returns the sleep's name.

    Raises ``ValueError`` for a bad reason or actor, ``JobNotFound`` for an id no job has, and
    ``ActionRefused`` for a job that does not sleep (or is no longer as ``seen``); nothing is
    written then.
    """
    name = actor_name(actor)
    check_reason(reason)
    with consolelog.audited_change(user_of(actor)) as audit:
        job = _job(job_id, seen, "woken")
        fence = seen.fence() if seen is not None else None
        woken = transitions.wake(job_id, actor=name, reason=reason, seen=fence)
        if woken is None:
            raise ActionRefused(_not_asleep(job_id))
        audit.log(
            job, f"woken (sleep {woken.sleep!r} was to end at {woken.until:%Y-%m-%d %H:%M:%S}): {reason}",
            title=f"Woke {_named(job)}",
        )  # fmt: skip
    return woken.sleep


def send_signal(
    job_id: int, signal: str, data: Any = None, *, reason: str, actor: Actor | None = None
) -> bool:
    """Send signal ``signal`` with ``data`` (plain JSON) to job ``job_id``, as the app's
    ``django_jobs.signal()`` sends one to the job of a key: kept until the job's wait for it
    takes it, and the job made due at once if it is parked in that wait. Returns False when a
    signal of that name had come already (the first one stands; the action is recorded all
    the same).

    Raises ``InvalidSignal`` for a bad name or data, ``ValueError`` for a bad reason or actor,
    ``JobNotFound`` for an id no job has, and ``ActionRefused`` for a job that has ended;
    nothing is written then.
    """
    encoded = signal_json(signal, data)
    name = actor_name(actor)
    check_reason(reason)
    with consolelog.audited_change(user_of(actor)) as audit:
        job = _job(job_id)
        sent = transitions.signal(job_id, signal, encoded, actor=name, reason=reason)
        if sent is None:
            raise ActionRefused(
                f"job {job_id} was sent no signal: it is {job.status}, and only a pending, running or "
                "waiting job takes one"
            )
        if not sent.stored:
            outcome = "not stored: one of that name had come already, and the first one stands"
        elif sent.woken:
            outcome = "stored; the job waited for it and is due now"
        else:
            outcome = "stored; the job's wait for it will take it"
        title = f"Sent {signal!r} to {_named(job)}"
        audit.log(job, f"sent signal {signal!r} ({outcome}): {reason}", title=title)
    return sent.stored


def parse_data(text: str) -> Any:
    """The signal data a form gave as JSON text (empty: ``null``); ``ValueError`` saying where
    it is not JSON."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the data is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc


def _not_asleep(job_id: int) -> str:
    parked = durable_reads.suspension(job_id)
    if parked is not None and parked.kind == "wait":
        return (
            f"job {job_id} was not woken: it waits for signal {parked.name!r}, not a sleep; "
            "send it the signal, or let its timeout come"
        )
    return f"job {job_id} was not woken: it does not sleep"
