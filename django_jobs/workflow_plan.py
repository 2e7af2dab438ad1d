"""What a workflow is made of, and the plan of jobs and barriers it becomes. Pure: no database.

A workflow is a tree of three shapes: a :class:`Step` is one job; a :class:`Chain` runs its
parts one after another; a :class:`Group` runs its members at once. They nest: a chain's part
may be a group (the next part waits for all its members), a group's member may be a chain.
:func:`plan` turns the tree into the rows to insert: each job with the barrier it feeds (the
count its end is kept in) and the barrier it waits on, and the barriers themselves. A tree
cannot hold a cycle; a part that appears twice (the same object, or a chain inside itself) is
refused, as is an empty chain or group, and more than ``MAX_JOBS`` jobs or ``MAX_STAGES``
steps one after another.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django_jobs.errors import InvalidWorkflow

#: The most jobs one workflow may hold, callbacks not counted.
MAX_JOBS = 100_000
#: The most steps one after another: a failed step cancels the rest of its chain one step at a
#: time, each in the transaction of the one before, and that nesting is bounded.
MAX_STAGES = 100
#: The most jobs one barrier counts directly: more make a tree of leaves of this many, so that
#: jobs ending together update different rows (see models/workflows.py).
LEAF_SIZE = 64

#: When a step after the first, or a callback, runs: every job it waits for completed (or was
#: skipped), at least one failed or was cancelled, or they all ended however.
SUCCEEDED, FAILED, ENDED = "succeeded", "failed", "ended"
#: Where a waiting step goes once every job it waits for has ended: by its condition, and by
#: whether one of them failed or was cancelled. The trigger that moves it is written from this
#: table (``transitions.workflow_triggers``).
WHEN_ENDED: dict[tuple[str, bool], str] = {
    (SUCCEEDED, False): "pending",
    (SUCCEEDED, True): "cancelled",
    (FAILED, False): "cancelled",
    (FAILED, True): "pending",
    (ENDED, False): "pending",
    (ENDED, True): "pending",
}


def runs_condition(runs_if: str, any_failed: str) -> str:
    """SQL that is true when a step runs by :data:`WHEN_ENDED`, from the SQL of its condition
    and of whether one of the jobs it waited for failed."""
    arms = []
    for failed in (False, True):
        conditions = sorted(c for (c, f), status in WHEN_ENDED.items() if f is failed and status == "pending")
        listed = ", ".join(f"'{c}'" for c in conditions)
        arms.append(f"({'' if failed else 'NOT '}{any_failed} AND {runs_if} IN ({listed}))")
    return " OR ".join(arms)


#: A chain's policy after a failed step: the rest of the chain is cancelled ("stop"), or runs
#: anyway ("continue").
ON_FAILURE = {"stop": SUCCEEDED, "continue": ENDED}


@dataclass(frozen=True, eq=False)
class Step:
    """One job of a workflow: what ``enqueue()`` takes, with the same options.

    In a step that waits for others, ``delay`` counts from when it becomes due; ``run_at``
    is a time it never runs before.
    """

    type: str | Callable[..., Any]
    payload: dict[str, Any]
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    delay: float | dt.timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    concurrency_key: str | None = None


@dataclass(frozen=True, eq=False, init=False)
class Chain:
    """Parts run one after another; with ``on_failure="stop"`` (the default) a part that fails
    cancels the rest, with ``"continue"`` the next part runs anyway."""

    parts: tuple[Node, ...]
    on_failure: str = "stop"

    def __init__(self, *parts: Node, on_failure: str = "stop") -> None:
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "on_failure", on_failure)


@dataclass(frozen=True, eq=False)
class Group:
    """Members run at once; what comes after waits for every one of them to end."""

    members: Iterable[Node]


Node = Step | Chain | Group


@dataclass
class PlannedJob:
    step: Step
    #: Where the step was written (0 first), for errors and for the drawing.
    path: str
    stage: int
    role: str = "step"
    waits_on: int | None = None  # index of a PlannedBarrier
    runs_if: str = SUCCEEDED
    feeds: int | None = None


@dataclass
class PlannedBarrier:
    size: int
    stage: int  # the stage of the last jobs it counts
    parent: int | None = None
    #: The tree's leaves, for a parent; each PlannedJob points at its own leaf.
    leaves: list[int] = field(default_factory=list)


@dataclass
class Plan:
    jobs: list[PlannedJob] = field(default_factory=list)
    barriers: list[PlannedBarrier] = field(default_factory=list)

    @property
    def members(self) -> int:
        return sum(1 for job in self.jobs if job.role == "step")


def plan(
    root: Node,
    callbacks: Mapping[str, Step | None] | None = None,
) -> Plan:
    """The jobs and barriers of ``root``, and of ``callbacks`` (``on_success``, ``on_failure``,
    ``on_complete``: each waits for every job of ``root`` that nothing else waits for).

    Raises ``InvalidWorkflow`` for an empty chain or group, a part seen twice, a bad
    ``on_failure``, or a workflow over the limits.
    """
    built = Plan()
    tails = _add(built, root, "workflow", None, SUCCEEDED, set(), 0)
    wanted = {role: step for role, step in (callbacks or {}).items() if step is not None}
    if wanted:
        barrier = _barrier_over(built, tails)
        runs = {"on_success": SUCCEEDED, "on_failure": FAILED, "on_complete": ENDED}
        for role, step in wanted.items():
            if role not in runs:
                raise InvalidWorkflow(f"{role!r} is not a callback: on_success, on_failure or on_complete")
            if not isinstance(step, Step):
                raise InvalidWorkflow(f"{role} must be a Step, not {type(step).__name__}")
            stage = built.barriers[barrier].stage + 1
            built.jobs.append(PlannedJob(step, role, stage, role, barrier, runs[role]))
    if built.members > MAX_JOBS:
        raise InvalidWorkflow(
            f"a workflow holds at most {MAX_JOBS:,} jobs besides its callbacks, not {built.members:,}"
        )
    return built


def _add(
    built: Plan, node: object, path: str, waits_on: int | None, runs_if: str, seen: set[int], stage: int
) -> list[int]:
    """Add ``node`` waiting on ``waits_on``; return the indexes of its last jobs."""
    if id(node) in seen:
        raise InvalidWorkflow(
            f"{path} appears twice in the workflow (a cycle, or a part reused): make a new one"
        )
    if stage >= MAX_STAGES:
        raise InvalidWorkflow(f"{path}: a workflow runs at most {MAX_STAGES} steps one after another")
    if isinstance(node, Step):
        seen.add(id(node))
        built.jobs.append(PlannedJob(node, path, stage, "step", waits_on, runs_if))
        return [len(built.jobs) - 1]
    if isinstance(node, Group):
        seen.add(id(node))
        members = list(node.members)
        if not members:
            raise InvalidWorkflow(f"{path} is a group of no jobs")
        tails: list[int] = []
        for i, member in enumerate(members):
            tails += _add(built, member, f"{path}[{i}]", waits_on, runs_if, seen, stage)
            if len(built.jobs) > MAX_JOBS:
                raise InvalidWorkflow(f"a workflow holds at most {MAX_JOBS:,} jobs besides its callbacks")
        return tails
    if isinstance(node, Chain):
        if node.on_failure not in ON_FAILURE:
            raise InvalidWorkflow(f"{path}: on_failure is 'stop' or 'continue', not {node.on_failure!r}")
        if not node.parts:
            raise InvalidWorkflow(f"{path} is a chain of no steps")
        seen.add(id(node))
        tails = _add(built, node.parts[0], f"{path}[0]", waits_on, runs_if, seen, stage)
        for i, part in enumerate(node.parts[1:], start=1):
            barrier = _barrier_over(built, tails)
            next_stage = built.barriers[barrier].stage + 1
            tails = _add(built, part, f"{path}[{i}]", barrier, ON_FAILURE[node.on_failure], seen, next_stage)
        return tails
    raise InvalidWorkflow(f"{path} is a {type(node).__name__}: a workflow is made of Step, Chain and Group")


def _barrier_over(built: Plan, tails: list[int]) -> int:
    """A barrier counting the jobs ``tails``; a tree when they are more than ``LEAF_SIZE``."""
    stage = max(built.jobs[i].stage for i in tails)
    if len(tails) <= LEAF_SIZE:
        built.barriers.append(PlannedBarrier(len(tails), stage))
        index = len(built.barriers) - 1
        for i in tails:
            built.jobs[i].feeds = index
        return index
    chunks = [tails[start : start + LEAF_SIZE] for start in range(0, len(tails), LEAF_SIZE)]
    built.barriers.append(PlannedBarrier(len(chunks), stage))
    parent = len(built.barriers) - 1
    for chunk in chunks:
        built.barriers.append(PlannedBarrier(len(chunk), stage, parent=parent))
        leaf = len(built.barriers) - 1
        built.barriers[parent].leaves.append(leaf)
        for i in chunk:
            built.jobs[i].feeds = leaf
    return parent
