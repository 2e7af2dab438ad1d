"""Fixtures of the database tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection


@pytest.fixture(scope="module")
def vacuum_afterwards(django_db_blocker: Any) -> Iterator[None]:
    """For a module whose tests fill the job table with many rows in their transactions: the
    rows are rolled back, but their index entries stay until a vacuum, and a later test's scan
    (a bitmap scan never marks them dead) would wade through them."""
    yield
    with django_db_blocker.unblock():
        settings = connection.settings_dict
        with psycopg.connect(
            host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"],
            autocommit=True,
        ) as conn:  # fmt: skip
            conn.execute("VACUUM ANALYZE django_jobs_job")
