"""What a page showed of a job, carried by its form to the action it confirms.

An operator decides on what the page showed: a job failed, at its fifth attempt. That page may
have been read from a replica that lags (``CONSOLE_DATABASE``), or minutes ago; by the time the
form is sent, someone else may have retried the job, and it may have run and failed again. So the
confirmation page writes what it showed of each job into its form (:func:`encode`), and the
action reads the job again on the primary, locked, and is refused when the job is no longer so
(:func:`change`): the operator acts on what they saw, or not at all.

What is compared is what moves whenever the job does: its status; its execution, which every
claim mints; its attempts, since a job sent back to pending by a retry or a recovery keeps no
execution; and its manual retries, since an operator's retry starts the attempts from zero.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django_jobs.models import Job
from django_jobs.states import JobStatus
from django_jobs.transitions.operator import Seen

#: What a page reads of a job to say what it showed.
COLUMNS = ("id", "status", "execution_id", "attempts", "manual_retries")

# id:status:execution:attempts:manual_retries, the execution empty when the job has none.
_SHOWN = re.compile(r"^([0-9]{1,18}):([a-z_]{1,20}):([0-9a-f-]{36})?:([0-9]{1,9}):([0-9]{1,9})$")


@dataclass(frozen=True)
class Shown:
    """A job as a page showed it."""

    id: int
    status: str
    execution_id: uuid.UUID | None
    attempts: int
    manual_retries: int

    @classmethod
    def of(cls, job: Job) -> Shown:
        return cls(job.id, str(job.status), job.execution_id, job.attempts, job.manual_retries)

    def fence(self) -> Seen:
        """The guard of the transition itself: it applies only to this status, execution and
        count of manual retries."""
        return Seen(self.status, self.execution_id, manual_retries=self.manual_retries)


def encode(jobs: Iterable[Shown]) -> str:
    """What a form carries of the jobs its page showed (a hidden field)."""
    return " ".join(f"{s.id}:{s.status}:{s.execution_id or ''}:{s.attempts}:{s.manual_retries}" for s in jobs)


def decode(text: str) -> dict[int, Shown]:
    """The jobs a form says its page showed, by id. Raises ``ValueError`` for anything
    :func:`encode` does not write."""
    shown = {}
    for part in text.split():
        match = _SHOWN.match(part)
        if match is None or match[2] not in JobStatus.values:
            raise ValueError(f"{part[:80]!r} is not a job as a page showed it")
        job_id, status, execution, attempts, retries = match.groups()
        shown[int(job_id)] = Shown(
            int(job_id), status, uuid.UUID(execution) if execution else None, int(attempts), int(retries)
        )
    return shown


def change(shown: Shown, job: Job) -> str | None:
    """How ``job``, as read now, differs from what the page showed of it; None if it does not."""
    if job.status != shown.status:
        return f"it is {job.status} now, not {shown.status} as the page showed it"
    if job.manual_retries != shown.manual_retries:
        return "it was retried by hand since the page showed it"
    if job.execution_id != shown.execution_id or job.attempts != shown.attempts:
        return f"it ran again since the page showed it (attempt {job.attempts} now, {shown.attempts} shown)"
    return None
