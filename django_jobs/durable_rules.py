"""The rules of durable jobs that need no database: what a step, sleep, wait or signal may be
called and carry, how long a sleep or a wait may be, and the errors that say what was wrong.

A durable job (docs/durable-jobs.md) replays its handler from the top on every execution; each
``ctx.step``, ``ctx.sleep`` and ``ctx.wait_for`` it meets takes the next *position* of the job
and finds there what an earlier execution recorded. Every check here runs before anything is
written, so a refused call writes nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from django_jobs.conf import jobs_settings
from django_jobs.errors import PermanentError
from django_jobs.jsonvalues import bounded_problem, encode, plain_json_problem

#: The longest sleep or wait (a year), as the longest retry delay: a job due later is a mistake.
MAX_SUSPEND_SECONDS = 365 * 24 * 3600.0
#: What a step, a sleep, a signal or a signal key may be called.
NAME_RE = re.compile(r"^[A-Za-z0-9_.:#-]{1,100}$")
KEY_RE = re.compile(r"^[^\s\x00]{1,200}$")


class InvalidStep(PermanentError, ValueError):
    """A step, sleep or wait asked for something it cannot be: a bad name, a name met twice, a
    result that is not plain JSON, a sleep of a negative or absurd duration. Nothing was
    written. Uncaught, the job fails: the same call would be refused on every replay."""

    default_code = "STEP_INVALID"


class ReplayMismatch(PermanentError):
    """A replay did not take the path the recorded execution took: at this position an earlier
    execution recorded another step (a step renamed, moved or made conditional on something
    that changed). Uncaught, the job fails: its recorded steps cannot be matched to the code."""

    default_code = "STEP_REPLAY_MISMATCH"


class SignalTimeout(PermanentError):
    """Raised by ``ctx.wait_for()`` when no signal of its name came before its timeout. The
    handler catches it to decide (cancel the order, remind the customer); uncaught, the job
    fails with code ``SIGNAL_TIMEOUT``. Every replay raises it again at the same wait."""

    default_code = "SIGNAL_TIMEOUT"


class InvalidSignal(ValueError):
    """``django_jobs.signal()`` or a signal key refused: a bad key or name, data that is not
    plain JSON or too large, a key nobody enqueued, a key already given to another job.
    Nothing was written."""


class UnknownSignalKey(InvalidSignal, LookupError):
    """``django_jobs.signal()`` to a key no job was enqueued with. Nothing was written."""


def check_name(name: object, what: str) -> str:
    """``name`` if it may name a step, sleep or signal, else ``InvalidStep``."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidStep(
            f"{what} name must be 1 to 100 letters, digits and _ . : # -, not {name!r}; nothing was written"
        )
    return name


def step_json(value: Any, name: str) -> str:
    """The stored form of step ``name``'s result; ``InvalidStep`` for a value that is not plain
    JSON or is larger than ``MAX_RESULT_BYTES``."""
    return _stored(
        value, f"the result of step {name!r}", "MAX_RESULT_BYTES", InvalidStep,
        not_json="; return plain JSON from a step. Nothing was written",
    )  # fmt: skip


def sleep_seconds(seconds: object, until: object) -> tuple[float | None, dt.datetime | None]:
    """The checked arguments of ``ctx.sleep``: exactly one of ``seconds`` (a finite number from
    0 to a year) and ``until`` (an aware datetime). Raises ``InvalidStep`` otherwise."""
    if (seconds is None) == (until is None):
        raise InvalidStep("ctx.sleep() takes seconds or until=, exactly one of them; nothing was written")
    if until is not None:
        if not isinstance(until, dt.datetime) or until.tzinfo is None:
            raise InvalidStep(f"sleep until= must be an aware datetime, not {until!r}; nothing was written")
        return None, until
    return duration(seconds, "sleep"), None


def duration(seconds: object, what: str) -> float:
    """``seconds`` as a float if it is a finite number from 0 to a year, else ``InvalidStep``."""
    if isinstance(seconds, dt.timedelta):
        seconds = seconds.total_seconds()
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise InvalidStep(
            f"a {what} must be a finite number of seconds, not {seconds!r}; nothing was written"
        )
    if not 0 <= seconds <= MAX_SUSPEND_SECONDS:
        raise InvalidStep(
            f"a {what} of {seconds!r}s is out of range (0 to {MAX_SUSPEND_SECONDS:.0f}s, a year); "
            "nothing was written"
        )
    return float(seconds)


def check_key(key: object) -> str:
    """``key`` if it may address a job (1 to 200 characters, no whitespace), else ``InvalidSignal``."""
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise InvalidSignal(f"a signal key must be 1 to 200 characters without spaces, not {key!r}")
    return key


def signal_json(name: object, data: Any) -> str:
    """The stored form of a signal's data; ``InvalidSignal`` for a bad name or for data that is
    not plain JSON or is larger than ``MAX_PAYLOAD_BYTES``."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidSignal(f"a signal name must be 1 to 100 letters, digits and _ . : # -, not {name!r}")
    what = f"the data of signal {name!r}"
    return _stored(data, what, "MAX_PAYLOAD_BYTES", InvalidSignal, size_of=f"signal {name!r}")


def _stored(
    value: Any,
    what: str,
    limit: str,
    error: type[Exception],
    *,
    not_json: str = "; nothing was written",
    size_of: str | None = None,
) -> str:
    """``value`` encoded as stored, or ``error`` saying why it cannot be: not plain JSON, or
    larger than the setting named ``limit``."""
    problem = plain_json_problem(value, what)
    if problem is not None:
        raise error(f"{problem}{not_json}")
    encoded = encode(value)
    too_large = bounded_problem(encoded, size_of or what, limit, getattr(jobs_settings, limit))
    if too_large is not None:
        raise error(f"{too_large}; nothing was written")
    return encoded
