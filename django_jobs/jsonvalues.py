"""Plain JSON values: what round-trips unchanged through PostgreSQL's jsonb.

Payloads (at enqueue) and checkpoints (from handlers) are checked here before they are written,
so a value that would be changed on the way (a tuple, an int key) or refused (NaN, NUL) is a
clear error to whoever gave it, and nothing is half-written. The stored forms of a progress
report and a checkpoint are made here too, for the context and for ``django_jobs.testing``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django_jobs.conf import jobs_settings
from django_jobs.errors import InvalidCheckpoint, InvalidProgress


def plain_json_problem(value: object, path: str) -> str | None:
    """What keeps ``value`` from round-tripping unchanged through jsonb, or None if nothing."""
    # Most values are fine: check without naming anything first, and walk again with the
    # paths (a string built per key would cost more than the check) only to say what is wrong.
    try:
        if _is_plain(value):
            return None
        return _problem(value, path)
    except RecursionError:
        return f"{path} is nested too deeply"


def _is_plain(value: object) -> bool:
    if type(value) is str:
        return "\x00" not in value and (value.isascii() or _is_utf8(value))
    if type(value) is dict:
        return all(type(key) is str and _is_plain(key) and _is_plain(item) for key, item in value.items())
    if type(value) is list:
        return all(_is_plain(item) for item in value)
    if value is None or type(value) is int or type(value) is bool:
        return True
    if type(value) is float:
        return math.isfinite(value)
    return False  # subclasses and the rest: the full walk decides, and names the culprit


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _problem(value: object, path: str) -> str | None:
    # json.dumps alone would silently turn int keys into strings and tuples into lists, and
    # PostgreSQL's jsonb refuses NUL characters: what a handler reads back must be exactly what was stored.
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path} contains a NUL character, which jsonb cannot store"
        if not _is_utf8(value):
            return f"{path} contains a lone surrogate (\\ud800-\\udfff), which is not valid Unicode text"
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return f"{path} is {value!r}, which is not valid JSON"
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (problem := _problem(item, f"{path}[{i}]")) is not None:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a non-string key {key!r}"
            problem = _problem(key, f"{path} key") or _problem(item, f"{path}[{key!r}]")
            if problem is not None:
                return problem
        return None
    return f"{path} is {_with_article(type(value).__name__)}, which is not a plain JSON value"


#: Type names that start with a vowel letter but are read with a consonant ("a UUID", "a uint8").
_READ_WITH_A_CONSONANT = ("UU", "uint", "uni", "Uni", "use", "Use", "one", "One")


def _with_article(noun: str) -> str:
    """``noun`` after "a" or "an", as it is read aloud: "an object", "a set", "a UUID"."""
    vowel = noun[:1].lower() in "aeiou" and not noun.startswith(_READ_WITH_A_CONSONANT)
    return f"{'an' if vowel else 'a'} {noun}"


#: One encoder for every call: ``json.dumps`` with options builds a new one each time, which
#: costs more than encoding a small payload.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode(value: object) -> str:
    """``value`` as compact JSON text; check it with :func:`plain_json_problem` first."""
    return _ENCODER.encode(value)


def bounded_problem(encoded: str, what: str, setting: str, limit: int) -> str | None:
    """Why ``encoded`` (the JSON text of ``what``) is too large for ``setting``, or None."""
    size = len(encoded.encode())
    if size > limit:
        return f"{what} is {size} bytes encoded, over {setting} ({limit})"
    return None


def check_progress(done: float, total: float | None = None) -> None:
    """Raise ``InvalidProgress`` for a progress value that is not a finite number."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidProgress(f"progress {name} must be a finite number, not {value!r}")


def progress_json(done: float, total: float | None = None) -> str:
    """The stored form of a progress report, checked by :func:`check_progress`.
    (``ctx.progress()`` and ``django_jobs.testing.report_progress()`` write it.)"""
    check_progress(done, total)
    return json.dumps({"done": done, "total": total})


def checkpoint_json(data: Any) -> str:
    """The stored form of a checkpoint; raises ``InvalidCheckpoint`` for data that is not plain
    JSON or is larger than ``MAX_CHECKPOINT_BYTES``. (``ctx.save_checkpoint()`` and
    ``django_jobs.testing.save_checkpoint()`` write it.)"""
    problem = plain_json_problem(data, "checkpoint")
    if problem is not None:
        raise InvalidCheckpoint(f"{problem}; nothing was written")
    encoded = encode(data)
    too_large = bounded_problem(
        encoded, "checkpoint", "MAX_CHECKPOINT_BYTES", jobs_settings.MAX_CHECKPOINT_BYTES
    )
    if too_large is not None:
        raise InvalidCheckpoint(f"{too_large}; nothing was written")
    return encoded
