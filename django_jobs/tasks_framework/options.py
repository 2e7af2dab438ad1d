"""The ``OPTIONS`` of a ``JobsBackend``'s ``TASKS`` entry: read, checked, and defaulted from
``DJANGO_JOBS``.

A bad entry must not raise while the backend is built: the framework builds its backends while
the project's ``tasks.py`` modules are imported, and a traceback there would hide every other
check message. ``read_options`` keeps what is wrong as problems instead (the backend reports
them as ``django_jobs.E061`` and raises them from ``enqueue()``), and puts the ``DJANGO_JOBS``
value in place of an option it refuses.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django_jobs.backoff import Backoff
from django_jobs.conf import DEFAULTS
from django_jobs.names import QUEUE_RE
from django_jobs.setting import user_settings

#: The options a backend knows.
OPTIONS = ("MAX_ATTEMPTS", "BACKOFF_BASE", "BACKOFF_CAP", "BACKOFF_JITTER", "TIMEOUT", "EXPIRES_IN")
OPTIONS_HINT = "See docs/django-tasks.md for the backend's options."

#: The DJANGO_JOBS setting each option defaults to.
_SETTING_OF = {
    "MAX_ATTEMPTS": "DEFAULT_MAX_ATTEMPTS",
    "BACKOFF_BASE": "BACKOFF_BASE",
    "BACKOFF_CAP": "BACKOFF_CAP",
    "BACKOFF_JITTER": "BACKOFF_JITTER",
}


@dataclass
class BackendOptions:
    """The policy of a backend's tasks, and what is wrong with its ``TASKS`` entry (in the order
    found: queues, unknown options, then each option)."""

    max_attempts: int
    backoff: Backoff
    timeout: float | None
    problems: list[str] = field(default_factory=list)
    #: Seconds from its enqueue by which each task of the backend must start, or it ends
    #: cancelled with code EXPIRED (``enqueue(expires_in=…)``); None: no deadline.
    expires_in: float | None = None


def read_options(alias: str, queues: Iterable[Any], options: Mapping[str, Any]) -> BackendOptions:
    """The policy the ``TASKS[alias]`` entry with these ``QUEUES`` and ``OPTIONS`` gives; never
    raises for a bad entry (see the module's docstring)."""
    reader = _Reader(alias, options)
    for queue in queues:
        if not isinstance(queue, str) or not QUEUE_RE.match(queue):
            reader.problems.append(f"TASKS[{alias!r}]: invalid queue name {queue!r}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        reader.problems.append(
            f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
            f"known: {', '.join(OPTIONS)}"
        )
    max_attempts: int = reader.option("MAX_ATTEMPTS", int, minimum=1, maximum=1000)
    backoff = reader.retry_policy()
    timeout = None if options.get("TIMEOUT") is None else reader.option("TIMEOUT", float, minimum=0.001)
    expires_in = (
        None if options.get("EXPIRES_IN") is None else reader.option("EXPIRES_IN", float, minimum=0.001)
    )
    return BackendOptions(max_attempts, backoff, timeout, reader.problems, expires_in)


class _Reader:
    """Reads the options of one entry, noting a problem for each it refuses."""

    def __init__(self, alias: str, options: Mapping[str, Any]) -> None:
        self.alias = alias
        self.options = options
        self.problems: list[str] = []

    def option(self, name: str, kind: type, minimum: float, maximum: float = math.inf) -> Any:
        """``OPTIONS[name]`` when it is sound, else the ``DJANGO_JOBS`` value it defaults to
        (None for ``TIMEOUT`` and ``EXPIRES_IN``; a problem is recorded only for the option:
        ``check_settings`` reports the setting)."""
        if name not in self.options:
            return _setting_default(name, kind, minimum, maximum)
        value = self.options[name]
        problem = _number_problem(value, kind, minimum, maximum)
        if problem is None:
            return kind(value)
        self.problems.append(f"TASKS[{self.alias!r}]['OPTIONS'][{name!r}] {problem}")
        return _setting_default(name, kind, minimum, maximum)

    def retry_policy(self) -> Backoff:
        base = self.option("BACKOFF_BASE", float, minimum=0)
        cap = self.option("BACKOFF_CAP", float, minimum=0)
        jitter = self.option("BACKOFF_JITTER", float, minimum=0, maximum=1)
        try:
            return Backoff(base=base, cap=cap, jitter=jitter)
        except ValueError as exc:  # each part is sound alone, not together (a cap below the base)
            self.problems.append(f"TASKS[{self.alias!r}]['OPTIONS'] (or DJANGO_JOBS['BACKOFF_*']): {exc}")
            return Backoff()


def _number_problem(value: Any, kind: type, minimum: float, maximum: float) -> str | None:
    """Why ``value`` is not a ``kind`` in [minimum, maximum], or None when it is."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or (kind is int and int(value) != value):
        return f"must be a {kind.__name__}, not {value!r}"
    if not (math.isfinite(value) and minimum <= value <= maximum):
        return f"must be between {minimum} and {maximum}, not {value!r}"
    return None


def _setting_default(option: str, kind: type, minimum: float, maximum: float) -> Any:
    """The ``DJANGO_JOBS`` value an option defaults to (None for ``TIMEOUT``); the built-in
    default while that setting is invalid (``manage.py check`` reports it as a ``DJANGO_JOBS``
    error)."""
    setting = _SETTING_OF.get(option)
    if setting is None:
        return None
    value = user_settings().get(setting, DEFAULTS[setting])
    if _number_problem(value, kind, minimum, maximum) is not None:
        value = DEFAULTS[setting]
    return kind(value)
