"""What finds a pooler in transaction mode in front of the jobs database (``runtime.pooler``),
and what ``manage.py check --database`` then says to set (``django_jobs.W004`` … ``W007``).

This package's conftest sends the test process's ``default`` alias through the bouncer, declared
pooled; ``replica`` is a direct connection to the same test database."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings

from django_jobs.checks import check_pooling
from django_jobs.runtime.pooler import Pooling, pooling_of
from tests.docs.snippets import python_blocks
from tests.process.behind_pgbouncer.conftest import direct_url, pooled_url
from tests.process.pgbouncer import PgBouncer
from tests.process.workers import ROOT


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def pooling_at(url: str) -> Pooling:
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        return pooling_of(conn, {"conninfo": url, "prepare_threshold": None})


def jobs_settings(**changes: Any) -> dict[str, Any]:
    return {**settings.DJANGO_JOBS, **changes}


def test_postgresql_a_session_pool_and_a_transaction_pool_are_told_apart(bouncer: PgBouncer) -> None:
    assert pooling_at(direct_url(bouncer)) is Pooling.DIRECT
    assert pooling_at(pooled_url(bouncer, declared=False)) is Pooling.TRANSACTIONS
    session = PgBouncer(bouncer.server[1], pool_mode="session", server_host=bouncer.server[0]).start()
    try:
        # A session pool keeps a client's server connection: it is a pooler, and LISTEN works.
        assert pooling_at(session.url(connections.settings["default"]["NAME"])) is Pooling.POOLER
    finally:
        session.stop()


def documented_recipe() -> dict[str, Any]:
    """The ``DATABASES`` and ``DJANGO_JOBS`` of docs/scaling.md's PgBouncer recipe."""
    [block] = [b for b in python_blocks() if b.path.name == "scaling.md" and "LISTEN_DATABASE" in b.code]
    namespace: dict[str, Any] = {}
    exec(block.compiled(), namespace)
    return namespace


def test_the_docs_recipe_is_the_one_these_tests_run() -> None:
    # This package's conftest: DATABASE_URL through the bouncer with DISABLE_SERVER_SIDE_CURSORS,
    # LISTEN_DATABASE_URL to the server (testproject/settings.py makes it LISTEN_DATABASE).
    recipe = documented_recipe()
    listen = recipe["DJANGO_JOBS"]["LISTEN_DATABASE"]
    assert set(recipe["DJANGO_JOBS"]) == {"LISTEN_DATABASE"}
    pooled, direct = recipe["DATABASES"]["default"], recipe["DATABASES"][listen]
    assert pooled["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert "prepare_threshold" not in pooled.get("OPTIONS", {})
    assert not direct.get("DISABLE_SERVER_SIDE_CURSORS") and direct["NAME"] == pooled["NAME"]


def test_the_recipe_draws_no_warning() -> None:
    # Here the direct alias of the recipe is "replica": the test database, not through the bouncer.
    with override_settings(DJANGO_JOBS=jobs_settings(LISTEN_DATABASE="replica")):
        assert check_pooling(databases=["default"]) == []


def test_workers_that_would_listen_through_the_pool_are_a_warning_unless_notify_is_off() -> None:
    assert ids(check_pooling(databases=["default"])) == ["django_jobs.W006"]
    with override_settings(DJANGO_JOBS=jobs_settings(NOTIFY=False)):
        assert check_pooling(databases=["default"]) == []


def test_an_undeclared_pool_and_prepared_statements_are_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    database = connections.settings["default"]
    monkeypatch.setitem(database, "DISABLE_SERVER_SIDE_CURSORS", False)
    monkeypatch.setitem(database, "OPTIONS", {**database["OPTIONS"], "prepare_threshold": 5})
    assert ids(check_pooling(databases=["default"])) == [
        "django_jobs.W004",
        "django_jobs.W005",
        "django_jobs.W006",
    ]
    assert check_pooling(databases=["replica"]) == []  # asked about another database only


def test_a_listen_database_that_reaches_another_database_is_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(connections.settings["replica"], "NAME", "postgres")
    with override_settings(DJANGO_JOBS=jobs_settings(LISTEN_DATABASE="replica")):
        assert ids(check_pooling(databases=["default"])) == ["django_jobs.W007"]


@pytest.mark.slow
def test_check_database_says_what_to_set_for_a_pool_it_finds(bouncer: PgBouncer) -> None:
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": pooled_url(bouncer, declared=False)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = result.stdout + result.stderr
    assert result.returncode == 0, said  # warnings: migrate and the worker still run
    for expected in ("W004", "DISABLE_SERVER_SIDE_CURSORS", "W006", "LISTEN_DATABASE"):
        assert expected in said
