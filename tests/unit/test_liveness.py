"""The liveness verdicts, each condition on its own, with the clock in the test's hands."""

from __future__ import annotations

from django_jobs.observe.liveness import HELD, Limits, Liveness

LIMITS = Limits(stall=30.0, outage=60.0, stuck=5.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def a_worker(clock: Clock, **probes: object) -> Liveness:
    liveness = Liveness(LIMITS, clock=clock, **probes)  # type: ignore[arg-type]
    liveness.started()
    liveness.loop_turned()
    liveness.database_answered()
    return liveness


def test_a_worker_that_turns_and_reaches_its_database_is_live_and_ready() -> None:
    liveness = a_worker(Clock(), slots=4, stuck=lambda past: 0, heartbeat=lambda: 1000.0)
    assert liveness.live().ok and liveness.live().text() == "ok\n"
    assert liveness.ready().ok


def test_as_many_stuck_executions_as_slots_make_a_worker_not_live() -> None:
    stuck = {"count": 3}
    asked: list[float] = []

    def count(past: float) -> int:
        asked.append(past)
        return stuck["count"]

    liveness = a_worker(Clock(), slots=4, stuck=count)
    assert liveness.live().ok  # a stuck thread among four: the pool replaced it, work goes on
    stuck["count"] = 4
    verdict = liveness.live()
    assert not verdict.ok
    assert verdict.reasons == ("4 execution(s) stuck past their deadline, with 4 slot(s)",)
    assert asked == [LIMITS.stuck, LIMITS.stuck]


def test_a_claim_loop_that_stopped_turning_makes_a_worker_not_live() -> None:
    clock = Clock()
    liveness = a_worker(clock)
    clock.now += 29
    assert liveness.live().ok
    clock.now += 2
    assert liveness.live().reasons == ("the claim loop has not turned for 31s",)
    liveness.loop_turned()
    assert liveness.live().ok


def test_a_dead_or_stalled_heartbeat_makes_a_worker_not_live() -> None:
    clock = Clock()
    beat: dict[str, float | None] = {"at": 1000.0}
    liveness = a_worker(clock, heartbeat=lambda: beat["at"])
    clock.now += 31
    liveness.loop_turned()
    assert liveness.live().reasons == ("the heartbeat has not turned for 31s",)
    beat["at"] = None
    assert liveness.live().reasons == ("the heartbeat thread is dead: leases are no longer extended",)


def test_a_database_outage_makes_a_worker_not_ready_at_once_and_not_live_past_the_limit() -> None:
    clock = Clock()
    liveness = a_worker(clock)
    liveness.database_lost()
    assert not liveness.ready().ok and liveness.live().ok
    clock.now += 30
    liveness.database_lost()  # a second failure does not restart the count
    clock.now += 31
    liveness.loop_turned()
    assert liveness.live().reasons == ("the database has been unreachable for 61s",)
    assert liveness.ready().reasons == ("the database is unreachable (for 61s)",)
    liveness.database_answered()
    assert liveness.live().ok and liveness.ready().ok


def test_a_worker_is_not_ready_before_start_up_nor_once_it_stops() -> None:
    clock = Clock()
    liveness = Liveness(LIMITS, clock=clock)
    assert liveness.ready().reasons == ("starting",)
    liveness.started()
    assert liveness.ready().reasons == ("starting",)  # the database has not answered yet
    liveness.database_answered()
    assert liveness.ready().ok
    liveness.loop_turned()
    liveness.stopping()
    verdict = liveness.ready()
    assert verdict.reasons == ("shutting down",) and verdict.text() == "shutting down\n"
    # Draining is healthy, however long the grace: the claim loop no longer turns then.
    clock.now += 3600
    assert liveness.live().ok


def test_several_reasons_are_all_given() -> None:
    clock = Clock()
    liveness = a_worker(clock, slots=1, stuck=lambda past: 1, heartbeat=lambda: None)
    assert len(liveness.live().reasons) == 2


def test_a_worker_held_by_a_restore_hold_stays_ready_and_says_so() -> None:
    held = [True]
    liveness = a_worker(Clock(), restore_held=lambda: held[0])
    verdict = liveness.ready()
    assert verdict.ok and liveness.restore_held()
    assert verdict.text() == f"ok\n{HELD}\n"
    held[0] = False
    assert liveness.ready().text() == "ok\n" and not liveness.restore_held()
    liveness.stopping()
    held[0] = True
    assert liveness.ready().text() == f"shutting down\n{HELD}\n"
