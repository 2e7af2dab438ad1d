"""The signs of a restore, judged from what the database recorded, what the server says and what
the worker saw: each sign, and each change that is not one."""

from __future__ import annotations

import pytest

from django_jobs import job
from django_jobs.job_types import JobType, Reconciliation
from django_jobs.models import RestoreHold
from django_jobs.restoring import Identity, Seen, judge

HERE = Identity(system_identifier=7715072939002476696, database_oid=16384, timeline=1)


def seen(generation: int, **changes: int) -> Seen:
    fields = {"system_identifier": HERE.system_identifier, "database_oid": HERE.database_oid, "timeline": 1}
    return Seen(Identity(**{**fields, **changes}), generation)


def test_the_first_look_of_all_finds_nothing() -> None:
    assert judge(None, HERE, None) is None


def test_the_same_database_looked_at_again_is_no_restore() -> None:
    assert judge(seen(5), HERE, None) is None  # a worker starting
    assert judge(seen(5), HERE, seen(5)) is None  # a worker's next look
    assert judge(seen(9), HERE, seen(5)) is None  # other workers looked meanwhile


def test_a_database_with_another_oid_was_recreated_whoever_looks() -> None:
    for witness in (None, seen(5), seen(2)):
        sign = judge(seen(5, database_oid=99), HERE, witness)
        assert sign is not None and sign.kind == RestoreHold.Kind.RECREATED
        assert "OID 99" in sign.evidence and "OID 16384" in sign.evidence


def test_a_database_behind_what_the_worker_saw_went_back() -> None:
    sign = judge(seen(4), HERE, seen(5))
    assert sign is not None and sign.kind == RestoreHold.Kind.WENT_BACK
    assert "generation 5" in sign.evidence and "generation 4" in sign.evidence


def test_a_record_gone_while_a_worker_ran_went_back() -> None:
    sign = judge(None, HERE, seen(3))
    assert sign is not None and sign.kind == RestoreHold.Kind.WENT_BACK


def test_a_new_timeline_nobody_saw_begin_is_held() -> None:
    sign = judge(seen(5, timeline=1), Identity(HERE.system_identifier, HERE.database_oid, 2), None)
    assert sign is not None and sign.kind == RestoreHold.Kind.NEW_TIMELINE
    assert "timeline 1 to 2" in sign.evidence


@pytest.mark.parametrize("generation", [5, 6])
def test_a_failover_a_worker_ran_across_with_nothing_lost_is_no_restore(generation: int) -> None:
    promoted = Identity(HERE.system_identifier, HERE.database_oid, 2)
    assert judge(seen(generation), promoted, seen(5)) is None


def test_a_failover_that_lost_what_a_worker_saw_went_back() -> None:
    promoted = Identity(HERE.system_identifier, HERE.database_oid, 2)
    sign = judge(seen(4), promoted, seen(5))
    assert sign is not None and sign.kind == RestoreHold.Kind.WENT_BACK


def test_a_new_system_identifier_alone_is_an_upgrade_not_a_restore() -> None:
    upgraded = Identity(1234, HERE.database_oid, 1)
    assert judge(seen(5), upgraded, None) is None


def test_which_types_wait_under_a_hold() -> None:
    def handler(ctx: object, payload: object) -> None: ...

    def answer(ctx: object, payload: object) -> Reconciliation:
        return Reconciliation.DONE

    inside = JobType("a", handler, external=False)
    assert not inside.acts_outside
    for outside in (
        JobType("a2", handler),  # says nothing: unknown means outside
        JobType("b", handler, external=True),
        JobType("c", handler, external_calls=("charge",)),
        JobType("d", handler, reconcile=answer, on_lost="reconcile"),
        JobType("e", handler, on_lost="needs_review"),
    ):
        assert outside.acts_outside, outside.name


@pytest.mark.parametrize("value", ["yes", 1])
def test_external_must_be_a_bool(value: object) -> None:
    with pytest.raises(ValueError, match="external must be True or False"):
        job("test.never_registered", external=value)  # type: ignore[arg-type]
