"""The streaming standby of a throwaway cluster that replica tests build on: it follows its
primary, and falls behind it on cue (replay paused) and catches up again (replay resumed)."""

from __future__ import annotations

from collections.abc import Iterator

import environ
import psycopg
import pytest
from django.db.utils import ConnectionHandler
from pytest_django import DjangoDbBlocker

from tests.process.throwaway_pg import ThrowawayCluster, ThrowawayStandby, wait_for_replay
from tests.process.workers import wait_for

pytestmark = pytest.mark.slow

ROWS = "SELECT count(*) FROM replicated"
#: Every byte of the primary's WAL so far has reached the standby (replayed or not).
RECEIVED = "SELECT (pg_last_wal_receive_lsn() >= '{}'::pg_lsn)::int"


@pytest.fixture
def primary() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    try:
        pg.create()
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def standby(primary: ThrowawayCluster) -> Iterator[ThrowawayStandby]:
    replica = primary.standby()
    try:
        yield replica
    finally:
        replica.destroy()


def test_the_standby_follows_falls_behind_on_cue_and_catches_up(
    primary: ThrowawayCluster, standby: ThrowawayStandby
) -> None:
    assert standby.scalar("SELECT pg_is_in_recovery()::int") == 1
    with primary.connect() as conn:
        conn.execute("CREATE TABLE replicated (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())")
        conn.execute("INSERT INTO replicated (id) VALUES (1)")
    wait_for_replay(primary, standby)
    assert standby.scalar(ROWS) == 1
    with standby.connect() as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("INSERT INTO replicated (id) VALUES (99)")

    standby.pause_replay()
    with primary.connect() as conn:
        conn.execute("INSERT INTO replicated (id) VALUES (2)")
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    lsn = str(row[0])
    wait_for(lambda: standby.scalar(RECEIVED.format(lsn)) == 1, what="the standby to receive the WAL")
    assert standby.scalar(ROWS) == 1
    assert standby.scalar("SELECT (now() - pg_last_xact_replay_timestamp() > interval '0')::int") == 1
    with pytest.raises(TimeoutError):
        wait_for_replay(primary, standby, timeout=0.5)

    standby.resume_replay()
    wait_for_replay(primary, standby)
    assert standby.scalar(ROWS) == 2


def test_the_standby_url_is_a_django_database(
    standby: ThrowawayStandby, django_db_blocker: DjangoDbBlocker
) -> None:
    handler = ConnectionHandler({"default": environ.Env.db_url_config(standby.url)})
    try:
        with django_db_blocker.unblock(), handler["default"].cursor() as cursor:
            cursor.execute("SELECT current_database(), inet_server_port(), pg_is_in_recovery()")
            assert cursor.fetchone() == ("jobs", standby.port, True)
    finally:
        handler.close_all()
