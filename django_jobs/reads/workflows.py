"""The reads of workflows: what a step waits for (for ``ctx.upstream()``, ``explainjob`` and
the console), the outcomes and results of those jobs, and a workflow's members for its page.

A step waits on one barrier; the jobs it waits for are those that feed that barrier, or feed
its leaves when it is a tree (``models/workflows.py``). Each statement reaches them through the
step table's ``(feeds, job)`` index, a leaf's worth at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings

#: The barrier a job waits on, its counts, and its leaves (none unless it is a tree).
WAITS_ON = """
SELECT b.id, b.size, b.remaining, b.failed, s.workflow_id, s.runs_if, s.role,
       ARRAY(SELECT l.id FROM django_jobs_barrier l WHERE l.parent_id = b.id ORDER BY l.id)
FROM django_jobs_workflowstep s JOIN django_jobs_barrier b ON b.id = s.waits_on_id
WHERE s.job_id = %s
"""
#: The outcome of every job feeding these barriers, in id order.
FED_BY = """
SELECT j.id, j.type, j.status, j.return_value, j.last_error_code, j.worker_id
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
WHERE s.feeds_id = ANY(%s)
ORDER BY s.job_id
"""
#: How many of the jobs feeding these barriers are in each status.
FED_BY_STATUS = """
SELECT j.status, count(*)
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
WHERE s.feeds_id = ANY(%s)
GROUP BY j.status
"""
#: The first jobs feeding these barriers that have not ended, with where they are.
NOT_ENDED = """
SELECT j.id, j.type, j.status, j.worker_id
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
WHERE s.feeds_id = ANY(%s) AND j.status IN ('waiting', 'pending', 'running', 'needs_review')
ORDER BY s.job_id
LIMIT %s
"""
#: The first jobs feeding these barriers that failed or were cancelled.
UNSUCCESSFUL = """
SELECT j.id, j.type, j.status, j.worker_id
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
WHERE s.feeds_id = ANY(%s) AND j.status IN ('failed', 'cancelled')
ORDER BY s.job_id
LIMIT %s
"""
#: The jobs counted by a tree's leaves: how many, not ended, ended with a failure.
LEAF_COUNTS = "SELECT sum(size), sum(remaining), sum(failed) FROM django_jobs_barrier WHERE parent_id = %s"
#: The members of a workflow with their places, in the order they were written.
MEMBERS = """
SELECT j.id, j.type, j.status, j.queue, j.last_error_code, s.position, s.stage, s.role,
       s.runs_if, s.feeds_id, s.waits_on_id
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
WHERE s.workflow_id = %s
ORDER BY s.position
LIMIT %s
"""
#: How many members of a workflow are in each status (the (workflow_id, id) index, with status).
MEMBER_STATUSES = "SELECT status, count(*) FROM django_jobs_job WHERE workflow_id = %s GROUP BY status"
#: How many members of each stage of a workflow are in each status.
STAGE_STATUSES = """
SELECT s.stage, j.status, count(*)
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
WHERE s.workflow_id = %s
GROUP BY s.stage, j.status
"""
#: The members of some stages, one by one, with the barrier each one feeds (its leaf's parent,
#: for a tree) and the one it waits on.
STAGE_JOBS = """
SELECT j.id, j.type, j.status, s.stage, s.role, COALESCE(b.parent_id, s.feeds_id), s.waits_on_id
FROM django_jobs_workflowstep s JOIN django_jobs_job j ON j.id = s.job_id
LEFT JOIN django_jobs_barrier b ON b.id = s.feeds_id
WHERE s.workflow_id = %s AND s.stage = ANY(%s)
ORDER BY s.stage, s.position
"""
#: The barriers the members of some stages feed and wait on, without the members.
STAGE_LINKS = """
SELECT DISTINCT s.stage, COALESCE(b.parent_id, s.feeds_id), s.waits_on_id
FROM django_jobs_workflowstep s LEFT JOIN django_jobs_barrier b ON b.id = s.feeds_id
WHERE s.workflow_id = %s AND s.stage = ANY(%s)
"""

#: Leaves read per statement: 16 leaves of 64 jobs.
_LEAVES_PER_READ = 16


@dataclass(frozen=True)
class Waits:
    """What a waiting step waits for."""

    barrier_id: int
    #: Jobs it waits for (leaves, for a tree: see ``jobs``), and how many have not ended.
    size: int
    remaining: int
    failed: int
    workflow_id: int
    runs_if: str
    role: str
    leaves: tuple[int, ...]

    @property
    def fed_by(self) -> list[int]:
        """The barriers whose jobs it waits for: its leaves, or itself."""
        return list(self.leaves) or [self.barrier_id]


@dataclass(frozen=True)
class MemberResult:
    """One job a step waited for, as it ended."""

    job_id: int
    type: str
    status: str
    #: What its handler returned (None if it returned nothing, or did not complete).
    result: Any
    error_code: str | None
    worker_id: str | None


class Upstream:
    """The jobs a workflow's step waited for, as a handler reads them (``ctx.upstream()``)."""

    def __init__(self, waited: Waits) -> None:
        self.workflow_id = waited.workflow_id
        self._waited = waited

    def summary(self) -> dict[str, int]:
        """How many of them ended in each status, e.g. ``{"completed": 998, "failed": 2}``."""
        return summary(self._waited)

    def results(self) -> Iterator[MemberResult]:
        """Each of them as it ended (id, type, status, result, error code), in id order; read
        a thousand at a time, so that a group of 100,000 never sits in memory whole."""
        return results(self._waited)

    def __repr__(self) -> str:
        return f"<Upstream of workflow {self.workflow_id}: barrier {self._waited.barrier_id}>"


def waits(job_id: int) -> Waits | None:
    """What the job waits for, or None for a job that waits for nothing."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(WAITS_ON, [job_id])
        row = cursor.fetchone()
    if row is None:
        return None
    barrier_id, size, remaining, failed, workflow_id, runs_if, role, leaves = row
    return Waits(barrier_id, size, remaining, failed, workflow_id, runs_if, role, tuple(leaves))


def results(waited: Waits) -> Iterator[MemberResult]:
    """The jobs ``waited`` counts, as they ended, in id order, a few leaves per read."""
    fed_by = waited.fed_by
    for start in range(0, len(fed_by), _LEAVES_PER_READ):
        with connections[jobs_settings.DATABASE].cursor() as cursor:
            cursor.execute(FED_BY, [fed_by[start : start + _LEAVES_PER_READ]])
            rows = cursor.fetchall()
        for row in rows:
            yield MemberResult(row[0], row[1], row[2], _json(row[3]), row[4], row[5])


def summary(waited: Waits) -> dict[str, int]:
    """How many of the jobs ``waited`` counts are in each status."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(FED_BY_STATUS, [waited.fed_by])
        return {status: count for status, count in cursor.fetchall()}


def not_ended(waited: Waits, limit: int) -> list[tuple[int, str, str, str | None]]:
    """The first ``limit`` jobs ``waited`` counts that have not ended: (id, type, status, worker)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(NOT_ENDED, [waited.fed_by, limit])
        return list(cursor.fetchall())


def unsuccessful(waited: Waits, limit: int) -> list[tuple[int, str, str, str | None]]:
    """The first ``limit`` jobs ``waited`` counts that failed or were cancelled: (id, type,
    status, worker)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(UNSUCCESSFUL, [waited.fed_by, limit])
        return list(cursor.fetchall())


def job_counts(waited: Waits) -> tuple[int, int, int]:
    """How many jobs ``waited`` counts, how many have not ended, and how many ended failed."""
    if not waited.leaves:
        return waited.size, waited.remaining, waited.failed
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(LEAF_COUNTS, [waited.barrier_id])
        size, remaining, failed = cursor.fetchone()
    return int(size or 0), int(remaining or 0), int(failed or 0)


def members(workflow_id: int, limit: int) -> list[tuple[Any, ...]]:
    """The first ``limit`` members of a workflow (see ``MEMBERS`` for the columns)."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(MEMBERS, [workflow_id, limit])
        return list(cursor.fetchall())


def stage_statuses(workflow_id: int) -> dict[int, dict[str, int]]:
    """For each stage of the workflow, how many of its members are in each status."""
    found: dict[int, dict[str, int]] = {}
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(STAGE_STATUSES, [workflow_id])
        for stage, status, count in cursor.fetchall():
            found.setdefault(stage, {})[status] = count
    return found


def stage_jobs(workflow_id: int, stages: list[int]) -> list[tuple[Any, ...]]:
    """The members of ``stages``: (id, type, status, stage, role, feeds, waits_on) each."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(STAGE_JOBS, [workflow_id, stages])
        return list(cursor.fetchall())


def stage_links(workflow_id: int, stages: list[int]) -> list[tuple[int, int | None, int | None]]:
    """(stage, barrier fed, barrier waited on) of the members of ``stages``, each once."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(STAGE_LINKS, [workflow_id, stages])
        return list(cursor.fetchall())


def member_statuses(workflow_id: int) -> dict[str, int]:
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(MEMBER_STATUSES, [workflow_id])
        return {status: count for status, count in cursor.fetchall()}


def _json(value: Any) -> Any:
    """A jsonb column as psycopg gives it through Django's raw cursor (text or decoded)."""
    if isinstance(value, str):
        return json.loads(value)
    return value
