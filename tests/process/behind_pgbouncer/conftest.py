"""Fixtures of the process tests that run behind PgBouncer in transaction mode: docs/scaling.md's
recipe, with every connection that can go through the pooler going through it.

- the workers (``worker_env``, so ``start_worker`` and every fixture built on it) connect
  through the bouncer, the alias declared pooled (``DISABLE_SERVER_SIDE_CURSORS``), and LISTEN
  on a direct connection (``LISTEN_DATABASE``);
- the test process's own ``default`` connection goes through it too, declared the same way: the
  jobs a test enqueues, its reads of their rows, the console it drives, the Tasks results it
  reads, and the flush that empties the tables after each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from tests.process.pgbouncer import PgBouncer


@pytest.fixture(scope="package")
def bouncer(django_db_setup: Any) -> Iterator[PgBouncer]:
    """One PgBouncer, in transaction mode, in front of the test database's server (created first,
    directly)."""
    database = connections.settings["default"]
    pgbouncer = PgBouncer(int(database["PORT"] or 5432), server_host=database["HOST"] or "127.0.0.1")
    pgbouncer.start()
    yield pgbouncer
    pgbouncer.stop()


@pytest.fixture(scope="package", autouse=True)
def test_process_through_the_bouncer(bouncer: PgBouncer) -> Iterator[None]:
    """The test process's ``default`` alias, for this package's tests only."""
    database = connections.settings["default"]  # the dict every thread's wrapper reads
    saved = {key: database.get(key) for key in ("HOST", "PORT", "DISABLE_SERVER_SIDE_CURSORS")}
    connections["default"].close()
    database.update(HOST="127.0.0.1", PORT=bouncer.port, DISABLE_SERVER_SIDE_CURSORS=True)
    try:
        yield
    finally:
        connections["default"].close()
        database.update(saved)


def direct_url(bouncer: PgBouncer) -> str:
    """The test database on its server, not through the bouncer."""
    host, port = bouncer.server
    return f"postgres://postgres@{host}:{port}/{connections.settings['default']['NAME']}"


def pooled_url(bouncer: PgBouncer, *, declared: bool = True) -> str:
    """The test database through the bouncer, declared pooled as Django asks (or not)."""
    url = bouncer.url(connections.settings["default"]["NAME"])
    return url + "?DISABLE_SERVER_SIDE_CURSORS=True" if declared else url


@pytest.fixture
def worker_env(worker_env: dict[str, str], bouncer: PgBouncer) -> dict[str, str]:
    """docs/scaling.md's recipe: claims and writes through the bouncer, LISTEN directly."""
    return {**worker_env, "DATABASE_URL": pooled_url(bouncer), "LISTEN_DATABASE_URL": direct_url(bouncer)}
