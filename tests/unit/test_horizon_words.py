"""What is said of the horizon's holders the shared test server cannot have (its replication
slots and standbys are not ours to create), and which of them count: the rule and the words,
on holders built by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from django_jobs.observe.horizon import sentence
from django_jobs.reads.horizon import Holder, _holds, excerpt

SLOT = Holder("slot", "old'standby", None, "physical", "inactive", None, None, 42, None)
STANDBY = Holder("standby", "4711", "replicator", "walreceiver", "streaming", "10.0.0.9", None, 9, None)


def test_an_inactive_slot_is_reported_whatever_its_age_and_told_how_to_drop_it() -> None:
    assert _holds(SLOT, older_than=300, xids_over=10**9)
    said = sentence(SLOT)
    assert said.startswith("inactive physical replication slot old'standby holds the vacuum horizon back")
    assert "SELECT pg_drop_replication_slot('old''standby')" in said  # pasted into psql as is


def test_a_slot_by_its_catalog_xmin_does_not_claim_to_hold_the_job_table() -> None:
    logical = replace(SLOT, kind="slot_catalog", application="logical")
    said = sentence(logical)
    assert "catalog_xmin" in said and "system catalogs" in said
    assert "no dead job row" not in said


@pytest.mark.parametrize(("xid_age", "reported"), [(9, False), (11, True)])
def test_what_cannot_say_since_when_is_reported_by_its_age_in_transactions(
    xid_age: int, reported: bool
) -> None:
    assert _holds(replace(STANDBY, xid_age=xid_age), older_than=0.0, xids_over=10) is reported
    assert _holds(replace(SLOT, state="active", xid_age=xid_age), older_than=0.0, xids_over=10) is reported


def test_a_standby_is_named_with_where_to_act() -> None:
    said = sentence(STANDBY)
    assert said.startswith("standby, WAL sender pid 4711 (user replicator, application walreceiver")
    assert "hot_standby_feedback" in said and "max_standby_streaming_delay" in said


def test_an_active_session_is_cancelled_before_it_is_terminated() -> None:
    active = Holder("session", "99", "app", "psql", "active", None, 400.0, 5, "SELECT 1")
    said = sentence(active)
    assert "has held the vacuum horizon back for 400s" in said
    assert "pg_cancel_backend(99)" in said and said.endswith("its statement: SELECT 1")


def test_an_excerpt_is_redacted_before_it_is_cut_and_kept_on_one_line() -> None:
    text = "SELECT\n\t1 -- " + "x" * 300 + " password=hunter2"
    assert excerpt(text, 40) == "SELECT 1 -- " + "x" * 27 + "…"
    cut_inside = "x" * 30 + " password=hunter2hunter2"  # the cut falls inside the secret
    assert "hunter" not in excerpt(cut_inside, 45)
