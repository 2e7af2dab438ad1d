"""Workflows the model enqueues, and what the docs say each of their jobs waits for.

A shape is a small tree of :class:`Step`, :class:`Chain` and :class:`Group` (docs/workflows.md),
drawn by Hypothesis. :func:`expected_waits` reads the docs' rules off the tree, without the
product's planner: a chain's part waits for the last jobs of the part before it (all of them
completed, or, with ``on_failure="continue"``, ended however); a group's members wait for what
the group waits for; a callback waits for the last jobs of the whole tree (``on_success``: all
succeeded, ``on_failure``: one failed or was cancelled, ``on_complete``: all ended). Jobs are
listed in the order they are written, which is the order of their ``WorkflowStep.position``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from django_jobs import Chain, Group, Step

#: The model's job types (testproject/testjobs/jobs.py): inside the database, parked when an
#: execution may have had its effect (so outside), and outside with a reconcile.
PLAIN, REVIEW, RECONCILED = "test.model", "test.model_review", "test.model_reconciled"
TYPES = (PLAIN, REVIEW, RECONCILED)
EXTERNAL = frozenset({REVIEW, RECONCILED})
QUEUES = ("emails", "reports")
KEYS = ("k1", "k2")

SUCCEEDED, FAILED, ENDED = "succeeded", "failed", "ended"
ENDED_STATUSES = frozenset({"completed", "skipped", "failed", "cancelled"})
SUCCEEDED_STATUSES = frozenset({"completed", "skipped"})
FAILED_STATUSES = ENDED_STATUSES - SUCCEEDED_STATUSES


@dataclass(frozen=True)
class Waits:
    """What one job of a workflow waits for (positions in the workflow), and when it runs."""

    on: frozenset[int]
    runs_if: str
    role: str = "step"


def condition_holds(runs_if: str, statuses: list[str]) -> bool:
    """Whether a step that waited for jobs now in ``statuses`` (all ended) runs."""
    failed = any(s in FAILED_STATUSES for s in statuses)
    return {SUCCEEDED: not failed, FAILED: failed, ENDED: True}[runs_if]


def expected_waits(root: object, callbacks: dict[str, Step | None]) -> list[Waits]:
    jobs: list[Waits] = []

    def add(node: object, on: frozenset[int], runs_if: str) -> list[int]:
        if isinstance(node, Step):
            jobs.append(Waits(on, runs_if))
            return [len(jobs) - 1]
        if isinstance(node, Group):
            tails: list[int] = []
            for member in node.members:
                tails += add(member, on, runs_if)
            return tails
        assert isinstance(node, Chain)
        tails = add(node.parts[0], on, runs_if)
        for part in node.parts[1:]:
            tails = add(part, frozenset(tails), SUCCEEDED if node.on_failure == "stop" else ENDED)
        return tails

    tails = frozenset(add(root, frozenset(), SUCCEEDED))
    runs = {"on_success": SUCCEEDED, "on_failure": FAILED, "on_complete": ENDED}
    for role in ("on_success", "on_failure", "on_complete"):
        if callbacks.get(role) is not None:
            jobs.append(Waits(tails, runs[role], role))
    return jobs


def steps() -> st.SearchStrategy[Step]:
    return st.builds(
        lambda kind, queue, key: Step(kind, {}, queue=queue, unique_key=key),
        st.sampled_from(TYPES),
        st.sampled_from(QUEUES),
        st.one_of(st.none(), st.none(), st.sampled_from(KEYS)),
    )


def _node(leaf: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        st.lists(leaf, min_size=1, max_size=3).map(lambda members: Group(members)),
        st.builds(
            lambda parts, policy: Chain(*parts, on_failure=policy),
            st.lists(leaf, min_size=1, max_size=3),
            st.sampled_from(["stop", "stop", "continue"]),
        ),
    )


#: A tree of at most a dozen jobs, two levels of nesting at most.
trees = st.recursive(steps(), _node, max_leaves=6)


@st.composite
def workflows(draw: st.DrawFn) -> tuple[object, dict[str, Step | None]]:
    """A tree and its callbacks (a tree that is a single step is wrapped in a chain)."""
    root = draw(trees)
    if isinstance(root, Step):
        root = Chain(root, draw(steps()))
    callbacks: dict[str, Step | None] = {
        role: draw(st.one_of(st.none(), steps())) for role in ("on_success", "on_failure", "on_complete")
    }
    return root, callbacks
