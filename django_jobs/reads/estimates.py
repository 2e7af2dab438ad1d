"""The planner's estimate of a result's size: the job list counts exactly only small results,
since a ``COUNT(*)`` of millions of rows reads every one of them; and a count bounded in rows
and in time, for the pages that must say "exactly N" when they can."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import EmptyResultSet
from django.db import DatabaseError, connections, transaction
from django.db.models import Model, QuerySet

T = TypeVar("T")
M = TypeVar("M", bound=Model)

#: Prefixed to a query: its plan, with the estimated rows; nothing is read (no index needed).
EXPLAIN = "EXPLAIN (FORMAT JSON) "


def estimated_rows(queryset: QuerySet[Model]) -> int:
    """How many rows the planner expects ``queryset`` to return, without running it."""
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # .none(), or filters Django knows contradict: nothing to read
        return 0
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(EXPLAIN + sql, params)
        return int(_plan(cursor.fetchone())[0]["Plan"]["Plan Rows"])


def _plan(row: Any) -> Any:
    # psycopg decodes the json column; a driver that does not hands back its text.
    plan = row[0]
    return json.loads(plan) if isinstance(plan, str) else plan


def bounded_count(queryset: QuerySet[Model], limit: int, timeout_ms: int) -> int | None:
    """How many rows ``queryset`` holds, counted up to ``limit`` (a count of ``limit`` means
    "at least that many"); None when counting took longer than ``timeout_ms``."""
    return within(queryset.db, timeout_ms, lambda: queryset[:limit].count())


def bounded_rows(queryset: QuerySet[M], timeout_ms: int) -> list[M] | None:
    """The rows of ``queryset`` (give it a LIMIT), or None when reading them took longer than
    ``timeout_ms``: ``ORDER BY id DESC LIMIT 20`` over rare matches walks an index until it has
    found 20, which may be the whole table."""
    return within(queryset.db, timeout_ms, lambda: list(queryset))


def within(alias: str, timeout_ms: int, read: Callable[[], T]) -> T | None:
    """``read()``, cancelled by PostgreSQL after ``timeout_ms`` (then None).

    The timeout is local to the read's transaction, or to the caller's when this runs inside
    one: the caller's own ``statement_timeout`` is put back after.
    """
    try:
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout')")
            before = cursor.fetchone()[0]
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(timeout_ms)])
            result = read()
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [before])
    except DatabaseError:  # cancelled by the timeout (and rolled back to where it started)
        return None
    return result
