"""What one setting of ``DJANGO_JOBS`` is: a typed, lazy descriptor, the rule its value keeps,
and its row of docs/configuration.md.

``django_jobs.conf`` declares every setting once with ``Setting(...)``; from that one line come
``DEFAULTS``, the typed attribute of ``jobs_settings``, the system check of its value (see
``problems()``; checks that relate several settings stay in ``checks.py``) and the docs' row.
The rules below are the shared vocabulary of those checks, so a bound is written once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, overload

from django.conf import settings
from django.core.signals import setting_changed

T = TypeVar("T")

#: What each setting read as, by name, until a setting changes (``override_settings`` and the
#: test runner's ``settings`` say so through ``setting_changed``): a worker reads several
#: settings for every job, and each read through ``django.conf.settings`` costs ~0.5 µs.
#: Values a caller could change in place (a dict, a list) are read afresh each time.
_read: dict[str, Any] = {}
_IMMUTABLE = (bool, int, float, str, bytes, tuple, frozenset, type(None))


def _forget(**_: Any) -> None:
    """Any setting changed: read every one again (a default computed from another one too)."""
    _read.clear()


setting_changed.connect(_forget, dispatch_uid="django_jobs.setting.forget")


class Problem(NamedTuple):
    """One check message about one setting's value (``checks.py`` turns it into an ``Error``)."""

    id: str
    message: str
    hint: str | None = None


#: Why a value is not valid for the setting named ``name``: one problem per fault, none if sound.
Rule = Callable[[str, Any], list[Problem]]


def user_settings() -> dict[str, Any]:
    """``settings.DJANGO_JOBS`` as set; ``{}`` while it is not a dict (check E001 reports it,
    and until it is fixed every default holds)."""
    user = getattr(settings, "DJANGO_JOBS", {})
    return user if isinstance(user, dict) else {}


class Setting(Generic[T]):
    """One key of ``DJANGO_JOBS``, read lazily at its first access and again after any setting
    changes, so ``override_settings`` works.

    ``read`` turns the value as set into what code reads (``float(1)``: a duration is a float;
    it may raise for a value that breaks ``rule``, which ``manage.py check`` reports first);
    ``when_none``, if given, computes the value from the other settings while the key is None;
    ``rule`` is the check of the value (None: checked elsewhere, or not at all); ``doc`` is its
    meaning (markdown), ``shown`` its default as the docs write it when its repr would not do;
    a ``credential`` is never shown, only said to be set (``conf.CREDENTIAL_SETTINGS``);
    ``per_access``, if given, turns the value read (and kept) into what each access returns, for
    a setting whose value depends on the code running now (``DATABASE`` while a page reads from
    ``CONSOLE_DATABASE``).
    """

    def __init__(
        self,
        default: Any,
        read: Callable[[Any], T],
        rule: Rule | None,
        doc: str,
        *,
        when_none: Callable[[Any], T] | None = None,
        shown: str | None = None,
        credential: bool = False,
        per_access: Callable[[T], T] | None = None,
    ) -> None:
        self.name = ""  # set by __set_name__: the attribute's name is the key's
        self.default = default
        self.read = read
        self.doc = doc
        self.rule = rule
        self.when_none = when_none
        self.shown = shown
        self.credential = credential
        self.per_access = per_access

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Setting[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Setting[T] | T:
        if obj is None:
            return self
        try:
            value = _read[self.name]
        except KeyError:
            raw = self.raw()
            value = self.when_none(obj) if raw is None and self.when_none is not None else self.read(raw)
            if isinstance(value, _IMMUTABLE):
                _read[self.name] = value
        return value if self.per_access is None else self.per_access(value)

    def raw(self) -> Any:
        """The value as the project set it, or the default."""
        return user_settings().get(self.name, self.default)

    def problems(self, value: Any) -> list[Problem]:
        """What the system checks report about ``value`` for this setting."""
        return [] if self.rule is None else self.rule(self.name, value)

    def default_text(self) -> str:
        """The default as the docs write it (markdown)."""
        return self.shown if self.shown is not None else f"`{_literal(self.default)}`"

    def markdown_row(self) -> str:
        return f"| `{self.name}` | {self.default_text()} | {self.doc} |"


def _literal(value: Any) -> str:
    """A default as written in Python settings, with the docs' double quotes for strings."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def markdown_table(table: Sequence[Setting[Any]]) -> str:
    """docs/configuration.md's table of settings."""
    rows = ["| key | default | meaning |", "|---|---|---|", *(s.markdown_row() for s in table)]
    return "\n".join(rows) + "\n"


# ---- readers: what code reads for a value as set -------------------------------------------


def optional(read: Callable[[Any], T]) -> Callable[[Any], T | None]:
    """``read``, except that None stays None (an option turned off, or nothing declared)."""
    return lambda value: None if value is None else read(value)


def string_tuple(value: Any) -> tuple[str, ...]:
    return tuple(value)


def string_set(value: Any) -> frozenset[str]:
    return frozenset(value)


def string_dict(value: Any) -> dict[str, Any]:
    """A copy: code that reads it cannot change the setting."""
    return dict(value)


# ---- rules ---------------------------------------------------------------------------------


def rule(accepts: Callable[[Any], bool], check_id: str, says: str, hint: str | None = None) -> Rule:
    """A rule with one message: ``DJANGO_JOBS[name]`` then ``says``, which may name ``{value!r}``."""

    def problems(name: str, value: Any) -> list[Problem]:
        if accepts(value):
            return []
        return [Problem(check_id, f"DJANGO_JOBS[{name!r}] " + says.format(value=value), hint)]

    return problems


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float (True is an int to Python, not a number of anything)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_fraction(value: Any) -> bool:
    """A number from 0 to 1."""
    return is_number(value) and 0 <= value <= 1


def is_positive_number(value: Any) -> bool:
    """A real, finite number above zero."""
    return is_number(value) and math.isfinite(value) and value > 0


def is_positive_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def or_none(accepts: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``accepts``, or None (an option turned off, or a value derived from others)."""
    return lambda value: value is None or accepts(value)


def seconds(check_id: str) -> Rule:
    """A duration: a finite number of seconds > 0."""
    return rule(is_positive_number, check_id, "must be a finite number > 0 (seconds).")


def optional_seconds(check_id: str, none_means: str) -> Rule:
    """A duration, or None, which means ``none_means``."""
    return rule(
        or_none(is_positive_number),
        check_id,
        f"must be None ({none_means}) or a finite number > 0 (seconds).",
    )


def positive_integer(check_id: str) -> Rule:
    return rule(is_positive_integer, check_id, "must be an integer > 0.")


def patterns(check_id: str) -> Rule:
    """A list (or tuple) of regular expressions: one problem per pattern that does not compile."""

    def problems(name: str, value: Any) -> list[Problem]:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            return [Problem(check_id, f"DJANGO_JOBS[{name!r}] must be a list of regular expressions.")]
        found = []
        for pattern in value:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                found.append(
                    Problem(
                        check_id,
                        f"DJANGO_JOBS[{name!r}] holds {pattern!r}, which is not a regular expression: {exc}",
                    )
                )
        return found

    return problems


def durations_by_status(statuses: Sequence[str], shape_id: str, duration_id: str) -> Rule:
    """A dict of some of ``statuses`` → seconds, or None for "forever"."""

    def problems(name: str, value: Any) -> list[Problem]:
        if not isinstance(value, dict):
            return [Problem(shape_id, f"DJANGO_JOBS[{name!r}] must be a dict of status → seconds.")]
        found = []
        for status, keep in value.items():
            if status not in statuses:
                found.append(
                    Problem(
                        shape_id,
                        f"DJANGO_JOBS[{name!r}] has an unknown status {status!r}.",
                        "Finished statuses that can be pruned: " + ", ".join(sorted(statuses)),
                    )
                )
            elif keep is not None and not is_positive_number(keep):
                found.append(
                    Problem(
                        duration_id,
                        f"DJANGO_JOBS[{name!r}][{status!r}] is {keep!r}: give seconds (a number > 0), "
                        "or None to keep these jobs forever.",
                    )
                )
        return found

    return problems
