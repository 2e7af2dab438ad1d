"""The arrow into ``pending``: the INSERT of new jobs, and the read of the jobs holding their keys.

The caller (``django_jobs.enqueueing``) has validated every value; these statements only write
them, on the caller's connection and in its transaction. Whatever makes a job pending also tells
the workers, at commit: a trigger on the job table sends the NOTIFY (migration 0005), not this
code.

A job whose ``unique_key`` is held by an active job of its type is not inserted: ``ON CONFLICT``
names the partial unique index by its columns and predicate, and the caller reads the holder
(``HOLDERS``) to return it instead. Jobs without a key take the same INSERT without the
``ON CONFLICT`` clause: none of them can conflict, and inferring the arbiter index among the
table's fifteen costs the server a tenth of a lone INSERT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django_jobs.states import KEY_HOLDING_STATUSES

#: The most rows one INSERT takes: a larger batch is several statements in one transaction.
ROWS_PER_INSERT = 5000

_HOLDING = ", ".join(f"'{status}'" for status in sorted(KEY_HOLDING_STATUSES))

_COLUMNS = (
    "queue, type, version, payload, status, priority, available_at, attempts, max_attempts, unique_key,"
    " on_lost, concurrency_key, concurrency_limit, on_lost_in_call, trace_context"
)

# One statement per chunk, whatever its size: the shared options are scalars and the per-job
# values two arrays, so neither the SQL text nor its parsing grows with the batch (a VALUES
# list of thousands of placeholders costs more on the client than the INSERT on the server).
# RETURNING follows the order of unnest(), as Django's own bulk_create relies on. The two
# timestamps are the same for every row of the statement (now() is the transaction's; the due
# time is computed once), so only the first row carries them: loading a timestamp costs more
# than the rest of a row.
# Insert many pending jobs sharing their options, from arrays: (id, unique_key, due, created).
_INSERT_MANY = (
    f"WITH made AS (INSERT INTO django_jobs_job ({_COLUMNS})"
    " SELECT %(queue)s, %(type)s, %(version)s, r.payload::jsonb, 'pending', %(priority)s,"
    " COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)), 0, %(max_attempts)s,"
    " r.unique_key, %(on_lost)s, r.concurrency_key,"
    " CASE WHEN r.concurrency_key IS NOT NULL THEN %(concurrency_limit)s::int END, %(on_lost_in_call)s,"
    " %(trace_context)s::jsonb"
    " FROM unnest(%(payloads)b::text[], %(keys)b::text[], %(concurrency_keys)b::text[])"
    " AS r(payload, unique_key, concurrency_key)"
    "{on_conflict}"
    " RETURNING id, unique_key, available_at, created_at)"
    " SELECT id, unique_key, CASE WHEN row_number() OVER () = 1 THEN available_at END,"
    " CASE WHEN row_number() OVER () = 1 THEN created_at END FROM made"
)

# A single job (every enqueue()) takes a plain VALUES row: the server plans it in a fraction of
# the time the CTE over unnest() takes, which is most of a lone INSERT's cost.
_INSERT_ONE = (
    f"INSERT INTO django_jobs_job ({_COLUMNS})"
    " VALUES (%(queue)s, %(type)s, %(version)s, %(payload)s::jsonb, 'pending', %(priority)s,"
    " COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)), 0, %(max_attempts)s,"
    " %(key)s, %(on_lost)s, %(concurrency_key)s, %(concurrency_limit)s::int, %(on_lost_in_call)s,"
    " %(trace_context)s::jsonb)"
    "{on_conflict}"
    " RETURNING id, unique_key, available_at, created_at"
)

_ON_CONFLICT = (
    f" ON CONFLICT (type, unique_key) WHERE status IN ({_HOLDING}) AND unique_key IS NOT NULL DO NOTHING"
)

#: Insert many pending jobs without keys: (id, NULL, due, created) each.
INSERT_MANY = _INSERT_MANY.format(on_conflict="")
#: Insert many pending jobs, some keyed: a job whose key is held returns no row.
INSERT_MANY_KEYED = _INSERT_MANY.format(on_conflict=_ON_CONFLICT)
#: Insert one pending job without a key: (id, NULL, due, created).
INSERT_ONE = _INSERT_ONE.format(on_conflict="")
#: Insert one pending job with a key: (id, unique_key, due, created), or no row if its key is held.
INSERT_ONE_KEYED = _INSERT_ONE.format(on_conflict=_ON_CONFLICT)

#: The active jobs of a type holding any of the keys, every column ({columns}: the model's).
HOLDERS = (
    "SELECT {columns} FROM django_jobs_job"
    f" WHERE type = %s AND unique_key = ANY(%s) AND status IN ({_HOLDING})"
)

Row = tuple[Any, ...]
#: One job to insert: its payload as JSON text, its unique key, its concurrency key.
NewJob = tuple[str, str | None, str | None]


def insert(
    cursor: Any,
    shared: Mapping[str, Any],
    jobs: Sequence[tuple[str, str | None, str | None]],
) -> list[Row]:
    """Insert ``jobs`` — (payload as JSON text, unique key, concurrency key) each — with the
    options of ``shared`` (queue, type, version, priority, run_at, delay, max_attempts, on_lost,
    concurrency_limit, on_lost_in_call, trace_context). Returns (id, unique_key, available_at,
    created_at) for each job inserted: unkeyed ones first in their order, then keyed ones in
    any order; a job whose key is held is missing. More than ``ROWS_PER_INSERT`` jobs take
    several statements: the caller opens the transaction that makes them one write.
    """
    if len(jobs) == 1:
        payload, key, concurrency_key = jobs[0]
        params = dict(shared, payload=payload, key=key, concurrency_key=concurrency_key)
        if concurrency_key is None:
            params["concurrency_limit"] = None
        cursor.execute(INSERT_ONE if key is None else INSERT_ONE_KEYED, params)
        one: list[Row] = cursor.fetchall()
        return one
    rows: list[Row] = []
    for start in range(0, len(jobs), ROWS_PER_INSERT):
        chunk = jobs[start : start + ROWS_PER_INSERT]
        unique_keys = [job[1] for job in chunk]
        keys = [job[2] for job in chunk]
        keyed = any(key is not None for key in unique_keys)
        params = dict(
            shared,
            payloads=[job[0] for job in chunk],
            # NULL when no job has a key: unnest() pads it with NULLs, nothing to send.
            keys=unique_keys if keyed else None,
            concurrency_keys=keys if any(key is not None for key in keys) else None,
        )
        cursor.execute(INSERT_MANY_KEYED if keyed else INSERT_MANY, params)
        made = cursor.fetchall()
        if made:
            _, _, available_at, created_at = made[0]
            rows += [(row[0], row[1], available_at, created_at) for row in made]
    return rows


def holders(cursor: Any, columns: Sequence[str], job_type: str, keys: Sequence[str]) -> list[Row]:
    """The rows (``columns``, in that order) of the active jobs of ``job_type`` holding ``keys``."""
    cursor.execute(HOLDERS.format(columns=", ".join(columns)), [job_type, list(keys)])
    found: list[Row] = cursor.fetchall()
    return found
