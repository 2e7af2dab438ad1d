"""``enqueue_chain()``, ``enqueue_group()``, ``enqueue_workflow()``: jobs that wait for each
other, written in the caller's transaction like ``enqueue()``.

Every step is checked as ``enqueue()`` checks a job (its type, payload and options), and the
shape of the whole as ``workflow_plan.plan`` does, before anything is written; then the
workflow, its barriers, its jobs and their steps are inserted together, inside a savepoint, so
that a refused workflow (a step whose unique key another job holds) leaves nothing behind.
The first steps are born ``pending``; every other one ``waiting``, until the jobs it waits for
have ended (``transitions.workflow_triggers`` has the triggers that decide it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from django.db import connections, transaction

from django_jobs import signals
from django_jobs.conf import jobs_settings
from django_jobs.enqueue_options import Options, resolve_type, validate_items, validate_options
from django_jobs.enqueueing import announce
from django_jobs.errors import InvalidWorkflow
from django_jobs.models import Job, Workflow
from django_jobs.observe import metrics, tracing
from django_jobs.transitions import workflows as sql
from django_jobs.workflow_plan import Chain, Group, Node, Plan, Step, plan

__all__ = ["Chain", "Group", "Step", "enqueue_chain", "enqueue_group", "enqueue_workflow"]


def enqueue_chain(*steps: Node, on_failure: str = "stop", name: str = "") -> Workflow:
    """Enqueue steps that run one after another: each starts once the one before completed,
    and reads its result with ``ctx.parent_result()``.

    A step may be a :class:`Group` (the next step waits for all its members). With
    ``on_failure="stop"`` (the default) a step that fails, or is cancelled, cancels the steps
    after it (code ``WORKFLOW_STOPPED``), and an operator's retry of that step makes them wait
    again; with ``"continue"`` the next step runs anyway. Returns the ``Workflow``; its jobs
    are ``Job.objects.filter(workflow_id=workflow.id)``.

    Raises ``InvalidWorkflow`` or another ``EnqueueError`` before writing anything.
    """
    return enqueue_workflow(Chain(*steps, on_failure=on_failure), name=name)


def enqueue_group(
    members: Iterable[Node],
    *,
    on_success: Step | None = None,
    on_failure: Step | None = None,
    on_complete: Step | None = None,
    name: str = "",
) -> Workflow:
    """Enqueue jobs that run at once, and callbacks that run once, after all of them ended.

    - ``on_complete`` runs when every member ended, however (completed, skipped, failed or
      cancelled);
    - ``on_success`` runs when every member completed (or skipped); else it is cancelled;
    - ``on_failure`` runs when every member ended and at least one failed or was cancelled;
      else it is cancelled.

    A member that ends in ``needs_review`` has not ended: the callbacks wait for its review.
    A callback reads the members' outcomes with ``ctx.upstream()``. An operator's retry of a
    failed member makes a cancelled ``on_success`` wait again; a callback that ran never runs
    twice. Raises ``InvalidWorkflow`` or another ``EnqueueError`` before writing anything.
    """
    callbacks = {"on_success": on_success, "on_failure": on_failure, "on_complete": on_complete}
    return enqueue_workflow(Group(members), name=name, callbacks=callbacks)


def enqueue_workflow(
    root: Node,
    *,
    name: str = "",
    callbacks: dict[str, Step | None] | None = None,
) -> Workflow:
    """Enqueue any tree of :class:`Step`, :class:`Chain` and :class:`Group` (see
    :func:`enqueue_chain` and :func:`enqueue_group`), with ``callbacks`` (``on_success``,
    ``on_failure``, ``on_complete``) waiting for the jobs of the tree that nothing else waits
    for. The workflow is a group when the tree is one, else a chain."""
    if not isinstance(name, str) or len(name) > 200 or "\x00" in name:
        raise InvalidWorkflow("name must be a string of at most 200 characters, without NUL")
    built = plan(root, callbacks)
    columns, delays_when_due = _columns(built)
    kind = "group" if isinstance(root, Group) else "chain"
    alias = jobs_settings.DATABASE
    # Traced, the workflow's enqueue is one span, and each member's executions its children.
    queues = set(columns["queues"])
    destination = queues.pop() if len(queues) == 1 else "(several queues)"
    traced = tracing.enqueue_span(destination, f"workflow:{kind}", len(built.jobs))
    with traced as span, transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(sql.INSERT_WORKFLOW, [kind, name, len(built.jobs)])
        (workflow_id,) = cursor.fetchone()
        barrier_ids = _insert_barriers(cursor, workflow_id, built)
        context = None if span is None else span.context
        inserted = sql.insert_members(cursor, workflow_id, columns, trace_context=context)
        if len(inserted) != len(built.jobs):
            raise InvalidWorkflow(_held_keys(cursor, built, inserted) + "; nothing was enqueued")
        job_ids = [row[0] for row in inserted]
        if span is not None:
            span.wrote(job_ids)
        cursor.execute(
            sql.INSERT_STEPS,
            {
                "workflow": workflow_id,
                "jobs": job_ids,
                "stages": [job.stage for job in built.jobs],
                "roles": [job.role for job in built.jobs],
                "feeds": [None if job.feeds is None else barrier_ids[job.feeds] for job in built.jobs],
                "waits_on": [
                    None if job.waits_on is None else barrier_ids[job.waits_on] for job in built.jobs
                ],
                "runs_if": [job.runs_if for job in built.jobs],
                "delays": delays_when_due,
            },
        )
        found = Workflow.objects.using(alias).get(id=workflow_id)
        if signals.listened(signals.job_enqueued):
            # Registered inside the savepoint: a workflow refused or rolled back announces nothing.
            announce(alias, list(Job.objects.using(alias).filter(id__in=job_ids).order_by("id")))
    if metrics.AVAILABLE or metrics.OTEL_AVAILABLE:
        metrics.enqueued(zip(columns["types"], columns["queues"], strict=True))
    return found


def _columns(built: Plan) -> tuple[dict[str, list[Any]], list[float]]:
    """The INSERT's arrays, one value per job, each job checked as ``enqueue()`` checks it; and
    each step's delay once due (a waiting step's delay counts from then)."""
    names = (
        "queues", "types", "versions", "payloads", "statuses", "priorities", "run_ats", "delays",
        "max_attempts", "keys", "on_losts", "concurrency_keys", "concurrency_limits", "on_lost_in_calls",
    )  # fmt: skip
    columns: dict[str, list[Any]] = {name: [] for name in names}
    delays_when_due: list[float] = []
    checked: dict[tuple[Any, ...], Options] = {}  # 100,000 members of one type check their options once
    for job in built.jobs:
        step = job.step
        try:
            job_type = resolve_type(step.type)
            key = (
                job_type.name,
                step.queue,
                step.priority,
                step.run_at,
                _hashable(step.delay),
                step.max_attempts,
            )
            options = checked.get(key)
            if options is None:
                options = checked[key] = validate_options(
                    job_type, step.queue, step.priority, step.run_at, step.delay, step.max_attempts
                )
            (item,) = validate_items(job_type, [step.payload], step.unique_key, step.concurrency_key)
        except InvalidWorkflow:
            raise
        except ValueError as exc:
            raise type(exc)(f"{job.path}: {exc}") from exc
        waits = job.waits_on is not None
        for name, value in (
            ("queues", options.queue),
            ("types", options.type),
            ("versions", options.version),
            ("payloads", item.encoded),
            ("statuses", "waiting" if waits else "pending"),
            ("priorities", options.priority),
            ("run_ats", options.run_at),
            # A waiting step's delay counts from when it becomes due (kept on its step).
            ("delays", 0.0 if waits else options.delay),
            ("max_attempts", options.max_attempts),
            ("keys", item.unique_key),
            ("on_losts", options.on_lost),
            ("concurrency_keys", item.concurrency_key),
            ("concurrency_limits", options.concurrency_limit if item.concurrency_key is not None else None),
            ("on_lost_in_calls", options.on_lost_in_call),
        ):
            columns[name].append(value)
        delays_when_due.append(options.delay if waits else 0.0)
    return columns, delays_when_due


def _hashable(delay: object) -> object:
    return delay if isinstance(delay, int | float | dt.timedelta | type(None)) else id(delay)


def _insert_barriers(cursor: Any, workflow_id: int, built: Plan) -> list[int]:
    """Insert the barriers, parents first; return their ids by plan index."""
    ids: list[int] = [0] * len(built.barriers)
    for leaves in (False, True):
        chosen = [i for i, b in enumerate(built.barriers) if (b.parent is not None) is leaves]
        if not chosen:
            continue
        cursor.execute(
            sql.INSERT_BARRIERS,
            {
                "workflow": workflow_id,
                "sizes": [built.barriers[i].size for i in chosen],
                "parents": [None if not leaves else ids[built.barriers[i].parent] for i in chosen],  # type: ignore[index]
            },
        )
        for i, (barrier_id,) in zip(chosen, cursor.fetchall(), strict=True):
            ids[i] = barrier_id
    return ids


def _held_keys(cursor: Any, built: Plan, inserted: list[tuple[int, str, str | None]]) -> str:
    """Which steps were not inserted because another job holds their unique key."""
    made = {(t, k) for _, t, k in inserted if k is not None}
    ours = {row[0] for row in inserted}
    missing = [job for job in built.jobs if job.step.unique_key is not None]
    named = []
    for job in missing:
        job_type = resolve_type(job.step.type).name
        if (job_type, job.step.unique_key) in made:
            continue
        cursor.execute(sql.KEY_HOLDERS, [job_type, [job.step.unique_key]])
        holder = cursor.fetchone()
        held_by = f"job {holder[1]}" if holder and holder[1] not in ours else "another step of this workflow"
        named.append(
            f"{job.path}: unique key {job.step.unique_key!r} of type {job_type} is held by {held_by}"
        )
    return "; ".join(named[:5]) or "a step's unique key is held by another job"


def jobs_of(workflow: Workflow | int) -> list[Job]:
    """The workflow's jobs, in the order they were written."""
    workflow_id = workflow if isinstance(workflow, int) else workflow.id
    alias = jobs_settings.DATABASE
    return list(Job.objects.using(alias).filter(workflow_id=workflow_id).order_by("step__position"))
