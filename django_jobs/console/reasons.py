"""What a person must say to act: who, and why. One rule for every audited action of the
console, of ``manage.py jobs`` / ``jobsqueue`` and of ``django_jobs.retry`` / ``cancel`` /
``pause_queue``: the text is kept whole in the history (``JobEvent``, ``QueueEvent``,
``ScheduleEvent``), so it must be there, fit its column and hold no NUL (PostgreSQL refuses it).

Two wordings of the one rule: :func:`reason_problem` for a person at a form or a prompt, and
:func:`check_text` for a caller of the Python API, which raises ``ValueError``.
"""

from __future__ import annotations

import enum

#: A reason is kept in the history, whole.
MAX_REASON_CHARS = 2000
#: ``JobEvent.actor`` (and the queue's and schedule's events) hold this many characters.
MAX_ACTOR_CHARS = 150


class Problem(enum.Enum):
    EMPTY = "empty"
    NUL = "nul"
    TOO_LONG = "too_long"


def text_problem(value: object, limit: int) -> Problem | None:
    """What keeps ``value`` from being recorded in a column of ``limit`` characters."""
    if not isinstance(value, str) or not value.strip():
        return Problem.EMPTY
    if "\x00" in value:
        return Problem.NUL
    if len(value) > limit:
        return Problem.TOO_LONG
    return None


def reason_problem(reason: object, *, kept_in: str = "the job's history") -> str | None:
    """Why a reason cannot be recorded, in words for the person who typed it; None when it can."""
    problem = text_problem(reason, MAX_REASON_CHARS)
    if problem is Problem.EMPTY:
        return f"Say why: the reason is kept in {kept_in}."
    if problem is Problem.NUL:
        return "The reason holds a NUL character, which cannot be stored."
    if problem is Problem.TOO_LONG:
        return f"Keep the reason under {MAX_REASON_CHARS} characters."
    return None


def check_text(what: str, value: object, limit: int, *, empty: str) -> None:
    """Raise ``ValueError`` if ``value`` (the ``what``: "actor", "reason") cannot be recorded;
    ``empty`` is the message for a missing one."""
    problem = text_problem(value, limit)
    if problem is Problem.EMPTY:
        raise ValueError(empty)
    if problem is Problem.NUL:
        raise ValueError(f"the {what} holds a NUL character, which cannot be stored")
    if problem is Problem.TOO_LONG:
        raise ValueError(f"the {what} is longer than {limit} characters")


def check_actor_and_reason(actor: object, reason: object) -> None:
    """Raise ``ValueError`` unless both the actor and the reason of an action can be recorded."""
    for what, value, limit in (("actor", actor, MAX_ACTOR_CHARS), ("reason", reason, MAX_REASON_CHARS)):
        check_text(what, value, limit, empty=f"say who and why: the {what} must be a non-empty string")
