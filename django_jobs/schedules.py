"""Schedules: when a periodic job is due. Pure: no database, no clock of its own.

A schedule is declared in code, on the job type (``@job("reports.nightly", schedule="0 3 * * *",
tz="Europe/Moscow")``) or in ``DJANGO_JOBS["SCHEDULES"]``. Its *ticks* are the instants it is
due: the matches of a cron expression in its time zone (computed by ``cronsim``), or the
multiples of a fixed interval counted from the Unix epoch (so every worker computes the same
ticks without talking to the others). The scheduler (``django_jobs.maintenance.periodic``) fires each tick
once, whatever the number of workers, by inserting a row keyed by (schedule, tick).

Time zones: a tick in a DST gap (a wall time that does not exist that day) fires at the first
instant after the gap; a fixed-time tick in a DST overlap (a wall time that happens twice) fires
once, at its first occurrence; expressions with a wildcard or step in the hour field (``*/30 *
* * *``) fire on both passes through the overlap. These are the rules of Debian's cron, which
``cronsim`` follows.
"""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cronsim import CronSim, CronSimError

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
#: Keys of an entry of ``DJANGO_JOBS["SCHEDULES"]``.
ENTRY_KEYS = frozenset(
    {"type", "cron", "every", "tz", "payload", "queue", "priority", "misfire_grace", "on_running"}
)
#: What a tick does while the previous tick's job is still pending or running.
ON_RUNNING_CHOICES = ("skip", "enqueue")


class InvalidSchedule(ValueError):
    """A schedule that cannot be computed: a bad expression, interval or time zone."""


@dataclass(frozen=True)
class Schedule:
    """One declared schedule: which job type it enqueues, when, and how it treats misfires."""

    #: The schedule's stable name: the job type's name for ``@job(schedule=...)``, the key of
    #: its entry for ``DJANGO_JOBS["SCHEDULES"]``. Tick rows are keyed by it.
    name: str
    type: str
    #: A cron expression (five fields), or None for an interval schedule.
    cron: str | None = None
    #: Seconds between ticks of an interval schedule, or None for a cron schedule.
    every: float | None = None
    tz: str = "UTC"
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    #: A tick found due more than so many seconds late (all workers were down) is not run but
    #: recorded as missed; None: any late tick still runs. Several missed ticks always coalesce
    #: into the latest one.
    misfire_grace: float | None = None
    #: "skip" (default): a tick that finds the previous tick's job still pending or running
    #: enqueues nothing and is recorded as skipped. "enqueue": it enqueues a job anyway.
    on_running: str = "skip"

    def __post_init__(self) -> None:
        problem = schedule_problem(self.cron, self.every, self.tz)
        if problem is not None:
            raise InvalidSchedule(f"schedule {self.name!r}: {problem}")
        if self.misfire_grace is not None and not (
            isinstance(self.misfire_grace, int | float) and self.misfire_grace >= 0
        ):
            raise InvalidSchedule(f"schedule {self.name!r}: misfire_grace must be seconds >= 0 or None")
        if self.on_running not in ON_RUNNING_CHOICES:
            raise InvalidSchedule(
                f"schedule {self.name!r}: on_running must be one of {', '.join(ON_RUNNING_CHOICES)}"
            )

    @property
    def zone(self) -> dt.tzinfo:
        return zoneinfo.ZoneInfo(self.tz)

    def next_after(self, moment: dt.datetime) -> dt.datetime:
        """The first tick strictly after ``moment`` (an aware datetime), in UTC."""
        if self.every is not None:
            elapsed = (moment - EPOCH).total_seconds()
            return EPOCH + dt.timedelta(seconds=(math.floor(elapsed / self.every) + 1) * self.every)
        assert self.cron is not None
        local = moment.astimezone(self.zone)
        tick: dt.datetime = next(iter(CronSim(self.cron, local)))
        return tick.astimezone(UTC)

    def ticks(self, after: dt.datetime) -> Iterator[dt.datetime]:
        """The ticks after ``after``, in order, for ever."""
        tick = self.next_after(after)
        while True:
            yield tick
            tick = self.next_after(tick)

    def latest_due(self, after: dt.datetime, now: dt.datetime) -> tuple[dt.datetime | None, int]:
        """The latest tick in (``after``, ``now``] and how many ticks that interval holds."""
        latest, count = None, 0
        if self.every is not None:
            # Arithmetic, not iteration: a one-second schedule down for a day has 86,400 ticks.
            first = self.next_after(after)
            if first > now:
                return None, 0
            count = int((now - first).total_seconds() // self.every) + 1
            return first + dt.timedelta(seconds=(count - 1) * self.every), count
        for tick in self.ticks(after):
            if tick > now:
                break
            latest, count = tick, count + 1
            if count >= 10_000:  # a minutely schedule down for a week: enough to say "many"
                latest = self._latest_cron_tick(now)
                break
        return latest, count

    def _latest_cron_tick(self, now: dt.datetime) -> dt.datetime:
        tick: dt.datetime = next(iter(CronSim(self.cron or "", now.astimezone(self.zone), reverse=True)))
        return tick.astimezone(UTC)

    def describe(self) -> str:
        """The schedule in words: "At 03:00 every day (Europe/Moscow)", "Every 2 seconds"."""
        if self.every is not None:
            every = int(self.every) if float(self.every).is_integer() else self.every
            return f"Every {every} second{'s' if every != 1 else ''}"
        assert self.cron is not None
        try:
            words = CronSim(self.cron, dt.datetime.now(self.zone)).explain()
        except Exception:  # explain() does not cover every expression the parser accepts
            words = self.cron
        return f"{words} ({self.tz})"

    @property
    def expression(self) -> str:
        return self.cron if self.cron is not None else f"every {self.every}s"


def schedule_problem(cron: object, every: object, tz: object) -> str | None:
    """What is wrong with a schedule's timing, in words, or None."""
    if (cron is None) == (every is None):
        return "give either a cron expression or an interval (every=seconds), not both"
    if not isinstance(tz, str) or not tz:
        return "tz must be the name of a time zone, e.g. 'Europe/Moscow'"
    try:
        zone = zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {tz!r} (use an IANA name such as 'Europe/Moscow')"
    if every is not None:
        if isinstance(every, bool) or not isinstance(every, int | float) or not math.isfinite(every):
            return "every must be a number of seconds"
        if every < 1:
            return "every must be at least 1 second"
        return None
    if not isinstance(cron, str):
        return "the cron expression must be a string"
    try:
        CronSim(cron, dt.datetime.now(zone))
    except CronSimError as exc:
        return f"bad cron expression {cron!r}: {exc}"
    if len(cron.split()) != 5:
        return f"bad cron expression {cron!r}: use five fields (minute hour day month weekday)"
    return None


def interval_seconds(value: float | dt.timedelta) -> float:
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


def from_entry(name: str, entry: Mapping[str, Any]) -> Schedule:
    """The schedule an entry of ``DJANGO_JOBS["SCHEDULES"]`` declares; raises InvalidSchedule."""
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise InvalidSchedule(
            f"schedule {name!r}: unknown key(s) {', '.join(sorted(unknown))}; "
            f"known: {', '.join(sorted(ENTRY_KEYS))}"
        )
    if not isinstance(entry.get("type"), str):
        raise InvalidSchedule(f"schedule {name!r}: 'type' must name a job type")
    payload = entry.get("payload", {})
    if not isinstance(payload, dict):
        raise InvalidSchedule(f"schedule {name!r}: 'payload' must be a dict")
    every = entry.get("every")
    if isinstance(every, dt.timedelta):
        every = every.total_seconds()
    return Schedule(
        name=name,
        type=entry["type"],
        cron=entry.get("cron"),
        every=every,
        tz=entry.get("tz", "UTC"),
        payload=dict(payload),
        queue=entry.get("queue"),
        priority=entry.get("priority"),
        misfire_grace=entry.get("misfire_grace"),
        on_running=entry.get("on_running", "skip"),
    )
