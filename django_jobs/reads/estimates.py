"""The planner's estimate of a result's size: the job list counts exactly only small results,
since a ``COUNT(*)`` of millions of rows reads every one of them."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import Model, QuerySet

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
