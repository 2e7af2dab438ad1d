"""PostgreSQL crashes and comes back behind PgBouncer, with a backlog under way (the test of
tests/process/test_database_outage.py, on a throwaway cluster with a bouncer of its own).

The pooler stays up through it: the workers' connections to it live on while the server
connections behind it die mid-statement, so a worker learns of the outage from the error of a
statement the pooler could not finish, or could not start for want of a server, and PgBouncer
logs in again once the server is back. The workers LISTEN directly, and reconnect by themselves.
"""

from __future__ import annotations

import pytest

from tests.process.pgbouncer import PgBouncer
from tests.process.test_database_outage import cluster, ride_out_a_restart
from tests.process.throwaway_pg import ThrowawayCluster

pytestmark = pytest.mark.slow

__all__ = ["cluster"]


def test_workers_behind_pgbouncer_ride_out_a_database_restart(cluster: ThrowawayCluster) -> None:
    env = {"DATABASE_URL": cluster.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    cluster.migrate(env)
    bouncer = PgBouncer(cluster.port).start()
    try:
        pooled = bouncer.url("jobs") + "?DISABLE_SERVER_SIDE_CURSORS=True"
        ride_out_a_restart(cluster, {**env, "DATABASE_URL": pooled, "LISTEN_DATABASE_URL": cluster.url})
    finally:
        bouncer.stop()
