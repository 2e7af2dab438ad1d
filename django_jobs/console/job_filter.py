"""Which jobs an operator means: a filter of the console's list, of ``manage.py jobs`` or of a
Python call, checked once here and turned into one condition served by the job table's indexes.

Every part narrows: a job matches when it meets all of them. ``ended_since`` / ``ended_until``
bound when a job ended (its ``finished_at``): "failed with PROVIDER_DOWN since 14:00" is
``JobFilter(status="failed", code="PROVIDER_DOWN", ended_since=...)``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from django.db.models import Q
from django.utils import timezone

from django_jobs.names import NAME_RE, QUEUE_RE
from django_jobs.reads.search import MAX_TERM_CHARS, search_condition
from django_jobs.sanitize import MAX_CODE_CHARS
from django_jobs.states import JobStatus

#: Stored error codes never hold other characters (``sanitize.error_code``).
CODE_RE = re.compile(rf"[\w.:/-]{{1,{MAX_CODE_CHARS}}}\Z")
#: "2h", "30m", "1d", "90s": that long before now.
_AGO = re.compile(r"^\s*([0-9]{1,6})\s*([smhd])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: "14:00": the last time the clock showed it, in the project's time zone.
_CLOCK = re.compile(r"^\s*([01]?[0-9]|2[0-3]):([0-5][0-9])\s*$")
_LARGEST_ID = 10**18


class InvalidFilter(ValueError):
    """A filter that cannot be applied: the message says which part and why."""


@dataclass(frozen=True)
class JobFilter:
    status: str | None = None
    queue: str | None = None
    type: str | None = None
    #: The code of the job's last error, whatever its status now.
    code: str | None = None
    ended_since: dt.datetime | None = None
    ended_until: dt.datetime | None = None
    workflow: int | None = None
    #: A term of the console's search box (``reads.search``).
    search: str | None = None

    def __post_init__(self) -> None:
        _check_choice("status", self.status, JobStatus.values)
        _check_pattern("queue", self.queue, QUEUE_RE, "a queue name")
        _check_pattern("type", self.type, NAME_RE, "a job type name")
        _check_pattern("code", self.code, CODE_RE, "an error code")
        for name in ("ended_since", "ended_until"):
            moment = getattr(self, name)
            if moment is not None and (not isinstance(moment, dt.datetime) or timezone.is_naive(moment)):
                raise InvalidFilter(f"{name} must be a datetime with a time zone, not {moment!r}")
        if self.ended_since and self.ended_until and self.ended_since >= self.ended_until:
            raise InvalidFilter("ended_since must be before ended_until")
        if (self.ended_since or self.ended_until) and self.status in (
            JobStatus.PENDING,
            JobStatus.RUNNING,
            JobStatus.WAITING,
        ):
            raise InvalidFilter(f"a {self.status} job has not ended: a time range applies to ended jobs")
        if self.workflow is not None and (
            isinstance(self.workflow, bool)
            or not isinstance(self.workflow, int)
            or not 1 <= self.workflow < _LARGEST_ID
        ):
            raise InvalidFilter(f"{self.workflow!r} is not a workflow id")
        if self.search is not None:
            if not isinstance(self.search, str) or not self.search.strip():
                raise InvalidFilter("the search must be a non-empty string")
            try:
                search_condition(self.search)
            except ValueError as exc:
                raise InvalidFilter(str(exc)) from None

    def condition(self) -> Q:
        """The jobs this filter matches, as one condition on the job table."""
        match = Q()
        for column, value in (
            ("status", self.status), ("queue", self.queue), ("type", self.type),
            ("last_error_code", self.code), ("finished_at__gte", self.ended_since),
            ("finished_at__lt", self.ended_until), ("workflow_id", self.workflow),
        ):  # fmt: skip
            if value is not None:
                match &= Q(**{column: value})
        if self.search is not None:
            match &= search_condition(self.search)
        return match

    def as_dict(self) -> dict[str, Any]:
        """The parts given, as JSON: what the operation records, and ``from_dict`` reads back."""
        given = {name: value for name, value in asdict(self).items() if value is not None}
        for name in ("ended_since", "ended_until"):
            if name in given:
                given[name] = given[name].isoformat()
        return given

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobFilter:
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidFilter(f"unknown filter part(s): {', '.join(map(str, unknown))}")
        values = dict(data)
        for name in ("ended_since", "ended_until"):
            if isinstance(values.get(name), str):
                values[name] = parse_moment(values[name], name)
        return cls(**values)

    def describe(self) -> str:
        """The filter in words, for a page or a log line."""
        return describe(self.as_dict())


def describe(given: dict[str, Any]) -> str:
    """A filter recorded by ``as_dict`` in words, as it was given: a recorded filter is shown,
    never checked again (a search field declared then may be gone now)."""
    return ", ".join(f"{name}={value}" for name, value in given.items()) or "every job"


def parse_moment(text: str, name: str = "time", now: dt.datetime | None = None) -> dt.datetime:
    """A moment as a person writes it: ISO 8601 (``2026-12-04T14:00``, in the project's time
    zone when it names none), a time of day (``14:00``: today, or yesterday if that is still
    to come) or an age (``2h``, ``30m``, ``1d``: that long before now)."""
    if not isinstance(text, str) or not text.strip() or "\x00" in text or len(text) > 40:
        raise InvalidFilter(f"{name}: give a time such as 2026-12-04T14:00, or an age such as 2h")
    now = now or timezone.now()
    clock = _CLOCK.match(text)
    if clock:
        local = timezone.localtime(now)
        moment = local.replace(hour=int(clock.group(1)), minute=int(clock.group(2)), second=0, microsecond=0)
        return moment if moment <= local else moment - dt.timedelta(days=1)
    ago = _AGO.match(text)
    if ago:
        seconds = int(ago.group(1)) * _UNIT_SECONDS[ago.group(2)]
        return now - dt.timedelta(seconds=seconds)
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidFilter(
            f"{name}: {text[:40]!r} is not a time; give one such as 2026-12-04T14:00, or an age such as 2h"
        ) from None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


def _check_choice(name: str, value: object, choices: list[str]) -> None:
    if value is not None and value not in choices:
        raise InvalidFilter(f"{name}: {str(value)[:40]!r} is not one of {', '.join(choices)}")


def _check_pattern(name: str, value: object, pattern: re.Pattern[str], what: str) -> None:
    if value is not None and (not isinstance(value, str) or not pattern.match(value)):
        raise InvalidFilter(f"{name}: {str(value)[:40]!r} is not {what}")


__all__ = ["MAX_TERM_CHARS", "InvalidFilter", "JobFilter", "describe", "parse_moment"]
