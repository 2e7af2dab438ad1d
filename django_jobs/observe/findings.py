"""What is wrong with the queues right now, as findings with a level: the answer of
``manage.py checkjobs`` and of the health check (``django_jobs.health``).

Three questions, each a few index probes whatever the size of the job table:

- the oldest due job of each queue (``CHECK_OLDEST_DUE_WARNING`` / ``_CRITICAL``): one loose
  index scan lists the queues (``Job.objects.distinct_values``), then, per queue, a probe per
  distinct (type, version, priority) of its ready jobs in ``django_jobs_ready_queue`` and one
  per kind of the jobs not promoted yet in ``django_jobs_later`` find its oldest due job;
- a queue with due jobs that no live worker serves (critical): the live-worker rows;
- running jobs whose lease expired and that no reaper took back: a warning, critical once the
  oldest expired more than ``CHECK_STALE_REAPER_INTERVALS`` × ``REAPER_INTERVAL`` ago (no
  reaper is running). Counted up to ``COUNT_CAP`` through the ``django_jobs_running`` index;
- what holds the vacuum horizon of the jobs database back (``CHECK_HORIZON_WARNING``,
  ``CHECK_HORIZON_XIDS``): a warning per holder, naming it (:mod:`django_jobs.observe.horizon`),
  read from the server's views, not the job table;
- an open restore hold (critical): jobs of external types wait for an operator
  (``manage.py jobsrestore``).

Paused queues are left out of the first two: their backlog waits for a person, on purpose. The
statements are in :mod:`django_jobs.reads.findings`.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from django_jobs.conf import jobs_settings
from django_jobs.models import Job, LiveWorker, Queue, RestoreHold, silence_threshold
from django_jobs.models.restore import open_hold
from django_jobs.observe import horizon
from django_jobs.reads import findings as reads
from django_jobs.reads.clock import database_now
from django_jobs.reads.horizon import Holder

#: Counting stale running jobs stops here: "N+" is enough to act on.
COUNT_CAP = 10_000


class Level(enum.StrEnum):
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class Finding:
    level: Level
    #: Stable code: oldest_due, no_worker, stale_running, horizon_held, restore_hold.
    code: str
    message: str
    queue: str | None = None
    #: The figure behind it: seconds (oldest_due, stale_running's oldest, horizon_held where the
    #: server says since when, else the snapshot's age in transactions) or a count.
    value: float | None = None
    #: What the finding is about, for --json: a horizon holder's kind, name (pid, gid, slot),
    #: user, application, state, seconds and transactions.
    subject: dict[str, Any] | None = None

    @property
    def critical(self) -> bool:
        return self.level == Level.CRITICAL

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "level": str(self.level),
            "code": self.code,
            "queue": self.queue,
            "value": self.value,
            "message": self.message,
        }
        if self.subject is not None:
            found["subject"] = self.subject
        return found


def find() -> list[Finding]:
    """Every finding now, critical ones first."""
    db = jobs_settings.DATABASE
    findings: list[Finding] = []
    paused = set(Queue.objects.using(db).filter(paused_at__isnull=False).values_list("name", flat=True))
    queues = [q for q in Job.objects.using(db).distinct_values("queue") if q not in paused]
    now = database_now()
    oldest = reads.oldest_pending_ages(queues)  # the queues whose oldest pending job is due
    stale, stale_age = reads.stale_running(COUNT_CAP)
    live = [w for w in LiveWorker.objects.using(db) if w.is_alive(now)]
    for queue, age in sorted(oldest.items()):
        findings.extend(_backlog(queue, age, live))
    if stale and stale_age is not None:
        findings.append(_stale(stale, stale_age))
    findings.extend(_held(holder) for holder in horizon.held_horizon())
    hold = open_hold(db)
    if hold is not None:
        findings.append(_restore_hold(hold))
    # Stable sort: the horizon's holders keep their order, the oldest snapshot first.
    return sorted(findings, key=lambda f: (not f.critical, f.code, f.queue or ""))


def _backlog(queue: str, age: float, live: list[LiveWorker]) -> list[Finding]:
    findings = []
    if not any(w.serves(queue) for w in live):
        findings.append(
            Finding(
                Level.CRITICAL,
                "no_worker",
                f"queue {queue} has due jobs and no live worker serves it (none reported within "
                f"{silence_threshold():g}s): start one, manage.py runjobs --queue {queue}",
                queue=queue,
                value=round(age, 1),
            )
        )
    if age > jobs_settings.CHECK_OLDEST_DUE_CRITICAL:
        level = Level.CRITICAL
        limit = jobs_settings.CHECK_OLDEST_DUE_CRITICAL
    elif age > jobs_settings.CHECK_OLDEST_DUE_WARNING:
        level = Level.WARNING
        limit = jobs_settings.CHECK_OLDEST_DUE_WARNING
    else:
        return findings
    findings.append(
        Finding(
            level,
            "oldest_due",
            f"queue {queue}: its oldest due job has waited {age:.0f}s (over {limit:g}s); "
            "manage.py explainjob on it says why",
            queue=queue,
            value=round(age, 1),
        )
    )
    return findings


def _stale(count: int, age: float) -> Finding:
    limit = jobs_settings.CHECK_STALE_REAPER_INTERVALS * jobs_settings.REAPER_INTERVAL
    counted = f"{count}+" if count >= COUNT_CAP else str(count)
    if age > limit:
        return Finding(
            Level.CRITICAL,
            "stale_running",
            f"{counted} running job(s) lost their lease, the oldest {age:.0f}s ago (over {limit:g}s): "
            "no reaper is running; run manage.py reapjobs, or a runjobs worker (it reaps too)",
            value=round(age, 1),
        )
    return Finding(
        Level.WARNING,
        "stale_running",
        f"{counted} running job(s) lost their lease, the oldest {age:.0f}s ago: the reaper takes "
        "them back on its next pass",
        value=round(age, 1),
    )


def _held(holder: Holder) -> Finding:
    """A warning, never critical: jobs still run (slower as dead rows pile up), and ending
    another's transaction is for a person to decide."""
    return Finding(
        Level.WARNING,
        "horizon_held",
        horizon.sentence(holder),
        value=round(holder.held_seconds, 1) if holder.held_seconds is not None else holder.xid_age,
        subject=dataclasses.asdict(holder),
    )


def _restore_hold(hold: RestoreHold) -> Finding:
    """Critical: jobs whose effects may be outside the database wait until a person looks."""
    return Finding(
        Level.CRITICAL,
        "restore_hold",
        f"restore hold {hold.id} open since {hold.opened_at:%Y-%m-%d %H:%M:%S %Z} ({hold.kind}, by "
        f"{hold.opened_by}): {hold.evidence}. Jobs of external types wait: manage.py jobsrestore",
        subject={"id": hold.id, "kind": hold.kind, "opened_by": hold.opened_by},
    )
