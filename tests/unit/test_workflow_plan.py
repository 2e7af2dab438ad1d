"""The shape of a workflow as jobs and barriers, and where a waiting step goes: pure rules, no
database."""

from __future__ import annotations

import pytest

from django_jobs.errors import EnqueueError, InvalidWorkflow
from django_jobs.states import ENDED_STATUSES, TRANSITIONS, JobStatus, can_transition
from django_jobs.workflow_plan import (
    ENDED,
    FAILED,
    LEAF_SIZE,
    MAX_JOBS,
    MAX_STAGES,
    SUCCEEDED,
    WHEN_ENDED,
    Chain,
    Group,
    Step,
    plan,
    runs_condition,
)


def step(n: int = 0) -> Step:
    return Step("test.noop", {"n": n})


# ---- the decision table of a waiting step --------------------------------------------------


@pytest.mark.parametrize(
    ("runs_if", "any_failed", "goes_to"),
    [
        (SUCCEEDED, False, JobStatus.PENDING),
        (SUCCEEDED, True, JobStatus.CANCELLED),  # its chain stops
        (FAILED, False, JobStatus.CANCELLED),  # an on_failure not needed
        (FAILED, True, JobStatus.PENDING),
        (ENDED, False, JobStatus.PENDING),
        (ENDED, True, JobStatus.PENDING),  # on_complete, or a chain that continues
    ],
)
def test_where_a_waiting_step_goes_once_the_jobs_it_waits_for_ended(
    runs_if: str, any_failed: bool, goes_to: str
) -> None:
    assert WHEN_ENDED[(runs_if, any_failed)] == goes_to
    assert can_transition(JobStatus.WAITING, goes_to)


def test_the_table_is_complete_and_every_way_out_of_waiting_is_an_arrow() -> None:
    assert set(WHEN_ENDED) == {(c, f) for c in (SUCCEEDED, FAILED, ENDED) for f in (False, True)}
    # Out of waiting: due (pending) or cancelled (stopped, or by an operator), or parked for a
    # person (a step a restore hold's release settled); nothing else. A waiting job never runs,
    # completes or fails without becoming pending first, or a person's review.
    assert TRANSITIONS[JobStatus.WAITING] == {JobStatus.PENDING, JobStatus.CANCELLED, JobStatus.NEEDS_REVIEW}
    # Into waiting: born so, a stopped step resumed (cancelled → waiting) or a due one not
    # started (pending → waiting) when a job it waits for is retried, or an operator's retry of a
    # step (from any status a retry leaves) while its barrier is closed.
    into = {source for source, targets in TRANSITIONS.items() if JobStatus.WAITING in targets}
    assert into == {JobStatus.CANCELLED, JobStatus.PENDING, JobStatus.FAILED, JobStatus.NEEDS_REVIEW}
    assert JobStatus.WAITING not in ENDED_STATUSES


def test_the_sql_condition_is_written_from_the_table() -> None:
    sql = runs_condition("s.runs_if", "f")
    assert (
        sql == "(NOT f AND s.runs_if IN ('ended', 'succeeded')) OR (f AND s.runs_if IN ('ended', 'failed'))"
    )


# ---- shapes ----------------------------------------------------------------------------------


def test_a_chain_is_one_barrier_per_link_each_job_waiting_on_the_one_before() -> None:
    built = plan(Chain(step(0), step(1), step(2)))
    assert [(j.stage, j.waits_on, j.feeds, j.runs_if) for j in built.jobs] == [
        (0, None, 0, SUCCEEDED),
        (1, 0, 1, SUCCEEDED),
        (2, 1, None, SUCCEEDED),
    ]
    assert [(b.size, b.parent) for b in built.barriers] == [(1, None), (1, None)]


def test_a_chain_that_continues_runs_its_next_steps_whatever_ended() -> None:
    built = plan(Chain(step(0), step(1), on_failure="continue"))
    assert built.jobs[1].runs_if == ENDED


def test_a_group_with_callbacks_shares_one_barrier() -> None:
    built = plan(
        Group([step(i) for i in range(3)]), {"on_success": step(), "on_complete": step(), "on_failure": None}
    )
    members, callbacks = built.jobs[:3], built.jobs[3:]
    assert {j.feeds for j in members} == {0} and all(j.waits_on is None for j in members)
    assert [(j.role, j.waits_on, j.runs_if, j.stage) for j in callbacks] == [
        ("on_success", 0, SUCCEEDED, 1),
        ("on_complete", 0, ENDED, 1),
    ]
    assert built.members == 3


def test_past_a_leaf_a_barrier_is_a_tree_so_no_row_counts_every_job() -> None:
    n = LEAF_SIZE * 3 + 1
    built = plan(Group([step(i) for i in range(n)]), {"on_complete": step()})
    parent = built.barriers[0]
    assert parent.parent is None and parent.size == 4 and len(parent.leaves) == 4
    leaves = [built.barriers[i] for i in parent.leaves]
    assert [leaf.size for leaf in leaves] == [LEAF_SIZE, LEAF_SIZE, LEAF_SIZE, 1]
    assert all(leaf.parent == 0 for leaf in leaves)
    # Each job feeds its own leaf; the callback waits on the parent.
    assert {built.jobs[i].feeds for i in range(LEAF_SIZE)} == {parent.leaves[0]}
    assert built.jobs[-1].waits_on == 0


def test_chains_and_groups_compose_a_step_that_waits_for_several() -> None:
    built = plan(Chain(step(0), Group([Chain(step(1), step(2)), step(3)]), step(4)))
    by_n = {j.step.payload["n"]: j for j in built.jobs}
    # 1 and 3 wait for 0; 2 waits for 1; 4 waits for 2 and 3 together.
    assert by_n[1].waits_on == by_n[3].waits_on == by_n[0].feeds
    assert by_n[2].waits_on == by_n[1].feeds
    assert by_n[2].feeds == by_n[3].feeds == by_n[4].waits_on
    assert built.barriers[by_n[4].waits_on].size == 2
    assert by_n[4].stage == 3  # after the longest path: 0 → 1 → 2 → 4


# ---- refused -------------------------------------------------------------------------------


def test_a_cycle_is_refused() -> None:
    first = step()
    looped = Chain(first)
    object.__setattr__(looped, "parts", (first, looped))  # a chain that contains itself
    with pytest.raises(InvalidWorkflow, match="appears twice"):
        plan(looped)


def test_a_step_used_twice_is_refused() -> None:
    same = step()
    with pytest.raises(InvalidWorkflow, match=r"workflow\[2\] appears twice"):
        plan(Chain(same, step(), same))


@pytest.mark.parametrize(
    ("root", "callbacks", "message"),
    [
        (Group([]), None, "group of no jobs"),
        (Chain(), None, "chain of no steps"),
        (Chain(step(), on_failure="ignore"), None, "on_failure is 'stop' or 'continue'"),
        (Group([step()]), {"on_success": Chain(step())}, "on_success must be a Step"),
        (Group([step(), "test.noop"]), None, r"workflow\[1\] is a str"),
        (Group([step()]), {"on_done": step()}, "'on_done' is not a callback"),
        (
            Chain(*[step(i) for i in range(MAX_STAGES + 1)]),
            None,
            f"at most {MAX_STAGES} steps one after another",
        ),
    ],
)
def test_a_bad_shape_is_refused_with_what_and_where(
    root: object, callbacks: dict | None, message: str
) -> None:
    with pytest.raises(InvalidWorkflow, match=message) as refused:
        plan(root, callbacks)  # type: ignore[arg-type]
    assert isinstance(refused.value, EnqueueError)


def test_the_limit_is_members_not_callbacks() -> None:
    built = plan(Group([step(i) for i in range(MAX_JOBS)]), {"on_complete": step()})
    assert built.members == MAX_JOBS and len(built.jobs) == MAX_JOBS + 1
    with pytest.raises(InvalidWorkflow, match="at most 100,000 jobs"):
        plan(Group([step(i) for i in range(MAX_JOBS + 1)]))
