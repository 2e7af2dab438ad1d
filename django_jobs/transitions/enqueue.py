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

The producer's controls take statements of their own, so that a plain enqueue pays nothing for
them: a job with a start-by deadline or a debounce key is inserted by a variant of the INSERT
that writes those columns (``controlled=True``); ``unique_for`` and ``debounce`` first take a
transaction-scoped advisory lock on each key (``LOCK_KEYS``), so that two enqueues of one key
in concurrent transactions take turns: the second reads what the first wrote once it commits
(READ COMMITTED: each statement sees what committed before it began), then reads the jobs of
the key within the window (``IN_WINDOW``) or updates the pending job of the debounce key
(``DEBOUNCE``).
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
    " on_lost, concurrency_key, concurrency_limit, on_lost_in_call, trace_context{control_columns}"
)
# The columns of the producer's controls, only in the statements of the jobs that use them. The
# deadline is the same for every row of a statement (now() is the transaction's), as the due time.
_CONTROL_COLUMNS = ", start_by, debounce_key"
_CONTROL_VALUES = (
    ", COALESCE(%(start_by)s::timestamptz, now() + make_interval(secs => %(expires_in)s::float8)),"
    " %(debounce_key)s::text"
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
    " %(trace_context)s::jsonb{control_values}"
    " FROM unnest(%(payloads)b::text[], %(keys)b::text[], %(concurrency_keys)b::text[])"
    " AS r(payload, unique_key, concurrency_key)"
    "{on_conflict}"
    " RETURNING id, unique_key, available_at, created_at{control_returned})"
    " SELECT id, unique_key, CASE WHEN row_number() OVER () = 1 THEN available_at END,"
    " CASE WHEN row_number() OVER () = 1 THEN created_at END{control_first} FROM made"
)

# A single job (every enqueue()) takes a plain VALUES row: the server plans it in a fraction of
# the time the CTE over unnest() takes, which is most of a lone INSERT's cost.
_INSERT_ONE = (
    f"INSERT INTO django_jobs_job ({_COLUMNS})"
    " VALUES (%(queue)s, %(type)s, %(version)s, %(payload)s::jsonb, 'pending', %(priority)s,"
    " COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)), 0, %(max_attempts)s,"
    " %(key)s, %(on_lost)s, %(concurrency_key)s, %(concurrency_limit)s::int, %(on_lost_in_call)s,"
    " %(trace_context)s::jsonb{control_values})"
    "{on_conflict}"
    " RETURNING id, unique_key, available_at, created_at{control_returned}"
)

_ON_CONFLICT = (
    f" ON CONFLICT (type, unique_key) WHERE status IN ({_HOLDING}) AND unique_key IS NOT NULL DO NOTHING"
)

_PLAIN = {"control_columns": "", "control_values": "", "control_returned": "", "control_first": ""}
_CONTROLLED = {
    "control_columns": _CONTROL_COLUMNS,
    "control_values": _CONTROL_VALUES,
    "control_returned": ", start_by",
    "control_first": ", CASE WHEN row_number() OVER () = 1 THEN start_by END",
}

#: Insert many pending jobs without keys: (id, NULL, due, created) each.
INSERT_MANY = _INSERT_MANY.format(on_conflict="", **_PLAIN)
#: Insert many pending jobs, some keyed: a job whose key is held returns no row.
INSERT_MANY_KEYED = _INSERT_MANY.format(on_conflict=_ON_CONFLICT, **_PLAIN)
#: Insert one pending job without a key: (id, NULL, due, created).
INSERT_ONE = _INSERT_ONE.format(on_conflict="", **_PLAIN)
#: Insert one pending job with a key: (id, unique_key, due, created), or no row if its key is held.
INSERT_ONE_KEYED = _INSERT_ONE.format(on_conflict=_ON_CONFLICT, **_PLAIN)
#: The same four with a start-by deadline and a debounce key: each row returns its deadline too
#: (a statement of many rows, in its first row only).
INSERT_MANY_CONTROLLED = _INSERT_MANY.format(on_conflict="", **_CONTROLLED)
INSERT_MANY_KEYED_CONTROLLED = _INSERT_MANY.format(on_conflict=_ON_CONFLICT, **_CONTROLLED)
INSERT_ONE_CONTROLLED = _INSERT_ONE.format(on_conflict="", **_CONTROLLED)
INSERT_ONE_KEYED_CONTROLLED = _INSERT_ONE.format(on_conflict=_ON_CONFLICT, **_CONTROLLED)

# The advisory locks of the producer's controls: (namespace, hash of type and key). A hash
# shared by two keys only makes their enqueues take turns; nothing else takes these locks.
UNIQUE_FOR_LOCKS = 0x646A7501
DEBOUNCE_LOCKS = 0x646A7502
#: Lock the keys of a type until the transaction ends, in a fixed order (no deadlock between
#: two calls locking several keys).
LOCK_KEYS = (
    "SELECT count(pg_advisory_xact_lock(%s::int, hashtext(%s::text || chr(31) || k.key)))"
    " FROM (SELECT DISTINCT unnest(%s::text[]) AS key ORDER BY 1) k"
)

#: The newest job of each key that holds it, or that was created or ended within the window
#: (seconds, by the database's clock), every column ({columns}: the model's).
IN_WINDOW = (
    "SELECT DISTINCT ON (unique_key) {columns} FROM django_jobs_job"
    " WHERE type = %(type)s AND unique_key = ANY(%(keys)s)"
    f" AND (status IN ({_HOLDING})"
    " OR created_at > now() - make_interval(secs => %(window)s)"
    " OR finished_at > now() - make_interval(secs => %(window)s))"
    " ORDER BY unique_key, id DESC"
)

#: The pending job of a debounce key that never started, its payload replaced (unless the
#: caller keeps the first) and its start pushed to the window's end, never earlier than it was;
#: every column ({columns}), or no row when there is none: then a new job is inserted. Locked
#: first: a claim that took it meanwhile leaves it running, and this changes nothing.
DEBOUNCE = (
    "WITH found AS (SELECT id FROM django_jobs_job"
    " WHERE type = %(type)s AND debounce_key = %(key)s AND status = 'pending' AND attempts = 0"
    " ORDER BY id DESC LIMIT 1 FOR UPDATE)"
    " UPDATE django_jobs_job j SET"
    " payload = CASE WHEN %(replace)s THEN %(payload)s::jsonb ELSE j.payload END,"
    " available_at = greatest(j.available_at, now() + make_interval(secs => %(window)s)),"
    " ready = greatest(j.available_at, now() + make_interval(secs => %(window)s)) <= now()"
    " FROM found WHERE j.id = found.id AND j.status = 'pending' AND j.attempts = 0"
    " RETURNING {columns}"
)

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
    concurrency_limit, on_lost_in_call, trace_context; and start_by, expires_in, debounce_key
    when the call uses a control). Returns (id, unique_key, available_at, created_at, and
    start_by with a control) for each job inserted: unkeyed ones first in their order, then keyed ones in
    any order; a job whose key is held is missing. More than ``ROWS_PER_INSERT`` jobs take
    several statements: the caller opens the transaction that makes them one write.
    """
    controlled = "start_by" in shared
    if len(jobs) == 1:
        payload, key, concurrency_key = jobs[0]
        params = dict(shared, payload=payload, key=key, concurrency_key=concurrency_key)
        if concurrency_key is None:
            params["concurrency_limit"] = None
        if controlled:
            statement = INSERT_ONE_CONTROLLED if key is None else INSERT_ONE_KEYED_CONTROLLED
        else:
            statement = INSERT_ONE if key is None else INSERT_ONE_KEYED
        cursor.execute(statement, params)
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
        if controlled:
            statement = INSERT_MANY_KEYED_CONTROLLED if keyed else INSERT_MANY_CONTROLLED
        else:
            statement = INSERT_MANY_KEYED if keyed else INSERT_MANY
        cursor.execute(statement, params)
        made = cursor.fetchall()
        if made:
            first = tuple(made[0][2:])  # due, created (and deadline): alike for every row
            rows += [(row[0], row[1], *first) for row in made]
    return rows


def holders(cursor: Any, columns: Sequence[str], job_type: str, keys: Sequence[str]) -> list[Row]:
    """The rows (``columns``, in that order) of the active jobs of ``job_type`` holding ``keys``."""
    cursor.execute(HOLDERS.format(columns=", ".join(columns)), [job_type, list(keys)])
    found: list[Row] = cursor.fetchall()
    return found


def lock_keys(cursor: Any, namespace: int, job_type: str, keys: Sequence[str]) -> None:
    """Hold an advisory lock on each ``(job_type, key)`` until the transaction ends."""
    cursor.execute(LOCK_KEYS, [namespace, job_type, list(keys)])


def in_window(
    cursor: Any, columns: Sequence[str], job_type: str, keys: Sequence[str], window: float
) -> list[Row]:
    """The rows (``columns``) of the newest job of each key that holds it or was created or
    ended within the last ``window`` seconds."""
    cursor.execute(
        IN_WINDOW.format(columns=", ".join(columns)), {"type": job_type, "keys": list(keys), "window": window}
    )
    found: list[Row] = cursor.fetchall()
    return found


def debounce(
    cursor: Any, columns: Sequence[str], job_type: str, key: str, payload: str, replace: bool, window: float
) -> Row | None:
    """Update the pending, never started job of ``(job_type, key)``: its payload replaced by
    ``payload`` when ``replace``, its start pushed to ``window`` seconds from now. Returns its
    row (``columns``), or None when there is no such job."""
    params = {"type": job_type, "key": key, "payload": payload, "replace": replace, "window": window}
    cursor.execute(DEBOUNCE.format(columns=", ".join(f"j.{c}" for c in columns)), params)
    row: Row | None = cursor.fetchone()
    return row
