"""When a claim reads every kind from its head (a sweep), and when from where the last claims
stopped: the rule of transitions.positions, on its own."""

from __future__ import annotations

import math
import time

from django.test import override_settings

from django_jobs.transitions.positions import DEAD_WALK_LIMIT, SWEEP_COST_SHARE, ClaimPositions

KINDS = [("test.noop", 1), ("test.other", 1), ("test.other", 2)]


DUE = 1_764_669_600.0  # 2026-12-02 10:00 UTC


def taken(
    *ids: int, kind: tuple[str, int] = ("test.noop", 1), queue: str = "default"
) -> list[tuple[str, str, int, int, float, int]]:
    return [(queue, kind[0], kind[1], 0, DUE + job_id, job_id) for job_id in ids]


def test_every_claim_is_a_sweep_while_claims_step_over_few_dead_entries() -> None:
    positions = ClaimPositions(KINDS)
    assert positions.sweep_due()
    positions.claimed(taken(1, 2, 3), walked=DEAD_WALK_LIMIT, swept=True, seconds=0.01)
    assert not positions.remembering and positions.sweep_due()


@override_settings(DJANGO_JOBS={"POLL_INTERVAL": 0.05})
def test_a_sweep_that_steps_over_many_starts_claims_where_they_stopped() -> None:
    positions = ClaimPositions(KINDS)
    positions.claimed(taken(7, 8), walked=DEAD_WALK_LIMIT + 1, swept=True, seconds=0.001)
    assert positions.remembering and not positions.sweep_due()
    # Each kind from its own place; a kind never claimed from, from its head.
    params = positions.params()
    assert params["kind_fp"] == [0, 101, 101] and params["kind_fi"] == [8, 0, 0]
    assert params["kind_fa"] == [DUE + 8, -math.inf, -math.inf]
    positions.claimed(taken(9), walked=0, swept=False, seconds=0.001)
    assert positions.params()["kind_fi"] == [9, 0, 0] and positions.resumed == 1
    # A sweep at least every POLL_INTERVAL.
    assert positions.sweep_due(time.monotonic() + 0.06)


@override_settings(DJANGO_JOBS={"POLL_INTERVAL": 0.05})
def test_sweeps_take_at_most_a_tenth_of_the_time_however_slow_they_get() -> None:
    positions = ClaimPositions(KINDS)
    positions.claimed(taken(1), walked=10 * DEAD_WALK_LIMIT, swept=True, seconds=2.0)
    now = time.monotonic()
    assert not positions.sweep_due(now + 0.06)
    assert not positions.sweep_due(now + SWEEP_COST_SHARE * 2.0 - 0.5)
    assert positions.sweep_due(now + SWEEP_COST_SHARE * 2.0 + 0.01)


def test_a_sweep_can_be_asked_for_and_one_that_steps_over_few_ends_the_mode() -> None:
    positions = ClaimPositions(KINDS)
    positions.claimed(taken(1), walked=DEAD_WALK_LIMIT + 1, swept=True, seconds=0.001)
    assert not positions.sweep_due()
    positions.want_sweep()
    assert positions.sweep_due()
    positions.claimed(taken(2), walked=3, swept=True, seconds=0.001)
    assert not positions.remembering and positions.sweeps == 2
    assert positions.most_walked == DEAD_WALK_LIMIT + 1


def test_the_place_is_the_last_job_taken_in_each_kind_even_one_a_sweep_took_before_it() -> None:
    positions = ClaimPositions(KINDS)
    positions.claimed(taken(50) + taken(5, kind=("test.other", 2)), walked=5000, swept=True, seconds=0.0)
    # A later sweep took a job before the place (a higher priority, given back…) and stopped
    # there: the next claims start from it, and step over what lies between once.
    positions.claimed(taken(3), walked=5000, swept=True, seconds=0.0)
    assert positions.params()["kind_fi"] == [3, 0, 5]


def test_a_worker_of_named_queues_has_a_place_per_queue_and_kind_in_the_claims_turn_order() -> None:
    positions = ClaimPositions(KINDS, ["default", "mail"])
    positions.claimed(taken(4) + taken(9, queue="mail"), walked=DEAD_WALK_LIMIT + 1, swept=True, seconds=0.0)
    params = positions.params(["mail", "default"])  # this claim's turn: mail first
    assert params["kind_fi"] == [[9, 0, 0], [4, 0, 0]]
    assert params["kind_fp"] == [[0, 101, 101], [0, 101, 101]]
    assert positions.params(["default", "mail"])["kind_fa"][0] == [DUE + 4, -math.inf, -math.inf]
