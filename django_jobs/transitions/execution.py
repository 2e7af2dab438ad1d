"""The claim: the arrow from ``pending`` to ``running`` that starts an execution.

One statement per batch of jobs (the hot path): it picks due jobs of known types and readable
versions in queues that are not paused, admits them under their concurrency keys and rate
windows, and mints each an ``execution_id`` and a lease. Every later write of the execution is
guarded by ``(id, execution_id, status='running')`` (``transitions.leases``, ``.outcomes``).

Over 300 lines: the claim is one statement composed from named parts (the promotion of due
scheduled jobs and when a claim skips it, the scan per kind, the walk of the kinds with ready
jobs, the key and rate admissions, the count of dead index entries, the variants for any queue
or named queues in turns, each from the heads or from the places of ``transitions.positions``)
and ``claimable`` reads the same parts; they are read and changed together, and their sizes
against psycopg's 4 KiB cache are weighed together, so they stay in one file. The rule of
when to claim from places lives in ``positions``.
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

from django_jobs.conf import jobs_settings
from django_jobs.limits import RateLimit
from django_jobs.transitions.cursor import bound_cursor
from django_jobs.transitions.positions import ClaimPositions


@dataclass(slots=True)
class Claim:
    """A job this worker holds: the columns an execution needs, read by the claim itself."""

    id: int
    queue: str
    type: str
    version: int
    payload: Any  # the raw jsonb text; decoded by the executor, one job at a time
    #: The number this execution will have once it starts (executions started before, plus one).
    attempt: int
    max_attempts: int
    execution_id: uuid.UUID
    unique_key: str | None
    checkpoint: Any
    priority: int
    #: The error of the previous attempt: tells whether its side effect may have happened.
    last_error_code: str | None
    #: The type's on_lost policy as stored on the row.
    on_lost: str
    #: True when the claim counted the attempt already (the job was taken for an idle thread);
    #: False for a prefetched job, whose attempt is counted once it starts.
    counted: bool
    #: The database's clock at the claim, in seconds since the epoch.
    claimed_at: float
    #: Seconds from the job's available_at to the claim, by the database's clock: from floats
    #: the claim returns, because parsing a timestamptz per row is a large part of its cost.
    waited: float = 0.0
    #: The trace context stored with the job (JSON text), read after the claim by a worker
    #: that traces (``observe.tracing.attach_contexts``); None otherwise.
    trace_context: str | None = None
    #: Whether its execution is traced, as asked once for its claimed batch (``attach_contexts``);
    #: None when nobody asked, and the execution asks itself.
    traced: bool | None = None
    #: The job's (created_at, available_at), read after the claim while ``job_started`` has a
    #: receiver (``runtime.started.read_after_claim``); None otherwise.
    start_times: tuple[dt.datetime, dt.datetime] | None = None
    #: Whether the job has a start-by deadline (the claim says): its start asks
    #: ``transitions.expiry`` first.
    has_deadline: bool = False


_CLAIM_COLUMNS = (
    "j.id, j.queue, j.type, j.version, j.payload,"
    " j.attempts + CASE WHEN next.start THEN 0 ELSE 1 END, j.max_attempts, j.execution_id,"
    " j.unique_key, j.checkpoint, j.priority, j.last_error_code, j.on_lost,"
    " next.start, extract(epoch FROM now())::float8, extract(epoch FROM j.available_at)::float8,"
    " j.start_by IS NOT NULL"
)
# Jobs of a paused queue stay pending. NOT IN over the tiny queue table is a hashed subplan:
# built once per claim, one hash probe per candidate row, and no join that could change how the
# claim index is scanned; the queue's name is NOT NULL, so NOT IN has no NULL trap.
_PAUSED_QUEUES = "SELECT p.name FROM django_jobs_queue_state p WHERE p.paused_at IS NOT NULL"
_NOT_PAUSED = f" AND queue NOT IN ({_PAUSED_QUEUES})"
_DUE_NOW = "available_at <= now()"
# The conditions on a pending row: due, room under its key and in its rate window, its queue not
# paused. The claim checks them when it scans a row, and claimable() reads them.
_ROW_CONDITIONS = _DUE_NOW + "{room_filters}" + _NOT_PAUSED
# The kinds a worker claims, as one filter: of a known type and a payload version it can read
# (claimable() reads the rule in this form). `version <= %(newest)s`, the newest version of any
# type the worker knows, is a cheap first test; the per-type bound reads the row.
_CLAIM_FILTER = (
    "status = 'pending' AND version <= %(newest)s AND type = ANY(%(types)s)"
    " AND version <= (%(versions)s::int[])[array_position(%(types)s::text[], type::text)]{oldest_filter}"
    f" AND {_ROW_CONDITIONS}"
)
_OLDEST_FILTER = " AND version >= (%(oldest)s::int[])[array_position(%(types)s::text[], type::text)]"
# The same kinds, one row each: every (type, version) the worker reads, from the oldest version
# its upcasters reach to the newest it decodes (listed by ClaimStatement: generate_series() in
# SQL would be planned as a thousand versions a type, and the claim as costly enough to compile).
# The claim scans the claim index once per kind, so the rows of other types and other versions
# are never read.
_KINDS = "SELECT * FROM unnest(%(kind_types)s::text[], %(kind_versions)s::int[]) AS k(type, version)"
# The kinds the claim scans carry the lease their executions get: each candidate takes its
# kind's, so the claim's UPDATE does not look each row's type up among the worker's types (a
# linear search, which cost a worker of 500 types a third of its claim).
_KINDS_LEASED = (
    "SELECT * FROM unnest(%(kind_types)s::text[], %(kind_versions)s::int[], %(kind_leases)s::float8[])"
    " AS k(type, version, lease)"
)
# The same kinds with the place this worker's claims stopped in each (see transitions.positions):
# its priority, due time (seconds since the epoch) and id; a kind without one has priority 101,
# above any job's.
_KINDS_FROM_PLACES = (
    "SELECT * FROM unnest(%(kind_types)s::text[], %(kind_versions)s::int[], %(kind_leases)s::float8[],"
    " %(kind_fp)s::int[], %(kind_fa)s::float8[], %(kind_fi)s::bigint[])"
    " AS k(type, version, lease, fp, fa, fi)"
)
_CANDIDATE_COLUMNS = (
    "id, priority, available_at, on_lost, last_error_code, type, queue, concurrency_key, concurrency_limit"
)
# One kind's claimable rows in the claim's order, from its claim index (django_jobs_ready, or
# django_jobs_ready_queue with `{queue}`): only rows that were due when written are in it, so
# jobs scheduled for later are not walked either. SKIP LOCKED passes over a row another claim is
# taking instead of queueing behind it, and goes on to the next, so concurrent workers take
# different rows. The first rows of every kind are merged in the claim's order; those of a kind
# that the LIMIT then cuts are unlocked when the statement commits (a worker whose kinds all
# have backlogs locks up to its batch of each, for one statement). The scan tests each row's
# key ({key_filter}), not its rate window: a kind's window is the same for all its rows, and a
# full one leaves the kind no room, so it is not scanned at all (see _RATE_KIND_ROOM).
_SCAN = (
    f"SELECT {_CANDIDATE_COLUMNS}, k.lease FROM django_jobs_job"
    " WHERE {queue}type = k.type AND version = k.version AND status = 'pending' AND ready"
    f" AND {_ROW_CONDITIONS.replace('{room_filters}', '{key_filter}')}"
    " ORDER BY priority DESC, available_at, id"
    " LIMIT {kind_room} FOR UPDATE SKIP LOCKED"
)
# One kind's claimable rows after the place its last claim stopped: the rest of the place's
# priority, from the place on (a range of the claim index: `priority = fp` and the row comparison
# are both index conditions), then the lower priorities. The two arms come in the claim's order,
# and the second is read only if the first leaves room. The entries before the place, those of
# the jobs claimed since vacuum last ran among them, are not read at all. The kind's room is
# computed once for both arms (`kr`, see _KINDS_IN_ROOM).
_SCAN_IN_ROOM = _SCAN.replace("{kind_room}", "kr.room")
_SCAN_FROM_PLACE = (
    "SELECT * FROM ("
    + _SCAN_IN_ROOM.replace(
        " ORDER BY priority DESC,",
        " AND priority = k.fp AND (available_at, id) > (to_timestamp(k.fa), k.fi) ORDER BY",
    )
    + ") a UNION ALL SELECT * FROM ("
    + _SCAN_IN_ROOM.replace(" ORDER BY", " AND priority < k.fp ORDER BY")
    + ") b LIMIT kr.room"
)
_KINDS_IN_ROOM = f"({_KINDS_FROM_PLACES}) k CROSS JOIN LATERAL (SELECT {{kind_room}} AS room) kr"
# The count of dead claim-index entries a claim steps over (see transitions.positions and
# migration 0016), read in a CTE before the scans (`walk`: the scans refer to it, so it is read
# first) and again in the claim's last row. The claim beside paused queues reads every kind from
# its head and counts nothing (0): its statement is the longest, and must stay within psycopg's
# cache of parsed statements (4 KiB).
_WALK = "walk AS MATERIALIZED (SELECT django_jobs_claim_index_reads() AS before), "
_WALKED = "(SELECT django_jobs_claim_index_reads() - wk.before FROM walk wk)::int"
_MERGED = (
    "SELECT s.* FROM {kinds} CROSS JOIN LATERAL ({scan}) s{walk_first}"
    " ORDER BY s.priority DESC, s.available_at, s.id"
)
# Jobs scheduled for later enter the claim index once due: a claim first marks up to
# PROMOTE_BATCH due ones of its kinds ready, through django_jobs_later (a probe per kind when
# none is due). They are claimable from the next statement on (this one's snapshot is older):
# the claim reports how many it promoted (the row with a NULL id), and claim() claims again.
# A kind no worker runs stays scheduled: nothing would claim it anyway.
#
# The probes cost about a microsecond a kind: a worker of 500 types spent a tenth of its claim
# on them, at every claim, while draining a backlog with nothing scheduled. So a claim promotes
# when the last one came back with room (a worker that is not saturated: every claim), when the
# last promotion found due jobs (more may be), and otherwise at least every PROMOTE_EVERY
# seconds; and a claim that skipped the promotion and came back short promotes and claims again
# at once (see claim()). A due job thus waits at most PROMOTE_EVERY for a worker whose every
# claim fills its batch, and no longer than before for any other.
PROMOTE_BATCH = 500
PROMOTE_EVERY = 0.05
# `id = ANY(ARRAY(...))` looks the promoted rows up by primary key: with `id IN (...)`, the planner
# may hash them and read the whole table to find them.
_PROMOTE = (
    "promoted AS (UPDATE django_jobs_job SET ready = true WHERE id = ANY(ARRAY(SELECT d.id FROM"
    f" {_KINDS.removeprefix('SELECT * FROM ')}"
    " CROSS JOIN LATERAL (SELECT id FROM django_jobs_job WHERE type = k.type AND version = k.version"
    f" AND status = 'pending' AND NOT ready AND {_DUE_NOW} ORDER BY available_at LIMIT {PROMOTE_BATCH}"
    f" FOR UPDATE SKIP LOCKED) d LIMIT {PROMOTE_BATCH})) RETURNING 1), "
)
# The claim takes up to %(limit)s jobs in one statement that commits by itself, before any of
# them runs. The version test keeps a worker from taking payloads it cannot read: newer than its
# code (a rolling deploy), or older than its upcasters reach.
#
# The first %(start_now)s rows go to idle threads and start at once: their attempt is counted
# here. The others are prefetched: counted when they start (the heartbeat or the outcome write
# records it), so a prefetched job given back unstarted, or lost with its worker before it
# started, did not use an attempt. Two kinds of rows are only ever taken for an idle thread,
# counted at once, never prefetched: a job of a type whose lost execution is unsafe to retry
# (on_lost other than retry: it must not be parked for review without having run), and a job
# already lost once before its start was recorded (so that a job that kills its worker at once
# still uses up its attempts); a job of a rate-limited type is a third (see _ADMIT_RATES).
# Between candidates and ranked, jobs whose concurrency key is at its limit are left out (see
# _ADMIT_KEYS). Rows locked here but left out are unlocked at commit. After the claimed rows
# (each with its position in the claim's order) comes one row with a NULL id:
# the number of queues paused now (in the version column), of dead claim-index entries stepped
# over (in the attempt column) and of jobs promoted (in the last).
# `row_number() OVER ()` numbers the candidates in the order the merge produced them
# (PostgreSQL's window aggregate keeps its input order), without sorting them again; the
# filters between candidates and ranked keep that order too.
_CLAIM_TAIL = (
    "{admit_keys}, ranked AS (SELECT *, row_number() OVER () AS pos,"
    " row_number() OVER () <= %(start_now)s AS start,"
    " on_lost = 'retry' AND last_error_code IS DISTINCT FROM 'LOST_UNSTARTED' AS pf"
    " FROM admitted),"
    " chosen AS (SELECT * FROM ranked WHERE start OR pf){admit_rates},"
    " claimed AS (UPDATE django_jobs_job j SET status = 'running', attempts = j.attempts + next.start::int,"
    " worker_id = %(worker)s, execution_id = gen_random_uuid(),"
    " started_at = CASE WHEN next.start THEN now() END, heartbeat_at = now(),"
    " lease_expires_at = now() + make_interval(secs => next.lease)"
    f" FROM next WHERE j.id = next.id RETURNING {_CLAIM_COLUMNS}, next.pos)"
    " SELECT * FROM claimed UNION ALL SELECT NULL, NULL, NULL,"
    f" (SELECT count(*) {_PAUSED_QUEUES.removeprefix('SELECT p.name ')})::int, NULL, {{walked}}, NULL,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {promoted}"
)
_COUNT_PROMOTED = "(SELECT count(*) FROM promoted)"


def _without_promotion(sql: str) -> str:
    """A claim statement that promotes, without its promotion (it reports none promoted)."""
    assert _PROMOTE in sql and _COUNT_PROMOTED in sql
    return sql.replace(_PROMOTE, "").replace(_COUNT_PROMOTED, "0")


def _claim_sql(candidates: str, kinds: str, scan: str, *, promotes: bool) -> str:
    """A claim statement: its candidates read from ``kinds`` with ``scan``, then the tail. A claim
    that reads from places promotes nothing (see _CLAIM_ANY_QUEUE_FROM_PLACES)."""
    promoted = _COUNT_PROMOTED if promotes else "0"
    return (
        "WITH "
        + (_PROMOTE if promotes else "")
        + candidates.replace("{kinds}", kinds).replace("{scan}", scan)
        + _CLAIM_TAIL.replace("{walked}", _WALKED).replace("{promoted}", promoted)
    )


_ANY_QUEUE_CANDIDATES = (
    f"{_WALK}candidates AS (SELECT c.* FROM walk wk CROSS JOIN LATERAL ({_MERGED} LIMIT %(limit)s) c)"
).replace("{walk_first}", " WHERE wk.before IS NOT NULL")
_CLAIM_ANY_QUEUE = _claim_sql(_ANY_QUEUE_CANDIDATES, f"({_KINDS_LEASED}) k", _SCAN, promotes=True).replace(
    "{queue}", ""
)
# The same, each kind read from the place this worker's last claim in it stopped (see
# transitions.positions): the claim of a worker whose claims step over many dead entries. It
# promotes nothing: a promoted job keeps its due time, before the places, so the sweeps, which
# read every kind from its head, promote jobs and claim them.
_CLAIM_ANY_QUEUE_FROM_PLACES = _claim_sql(
    _ANY_QUEUE_CANDIDATES, _KINDS_IN_ROOM, _SCAN_FROM_PLACE, promotes=False
).replace("{queue}", "")
# A worker of every queue that knows many kinds (more than MANY_KINDS) first finds the kinds that
# hold ready jobs at all, whoever runs them: a loose index scan of django_jobs_ready, one probe per
# such kind, each seeking past the kind it found. Then it scans only its own among them. A scan
# per kind the worker knows costs about a microsecond, most of them finding nothing: a worker of
# 500 kinds spent 0.57 ms a claim more than one of 2; the walk costs 0.1-0.3 ms, more than it
# saves below about 128 kinds. It walks from the last kind to the first, and lands in each at
# its last entry: claims take a kind's jobs from the other end, where the entries of the jobs
# claimed since vacuum last ran lie, so the walk does not step over them. Its index reads count
# as the claim's, less one per kind found (dead entries it steps over count: a drained kind's).
MANY_KINDS = 128
_KINDS_WITH_READY_JOBS = (
    "live AS ((SELECT type::text t, version v FROM django_jobs_job WHERE status = 'pending' AND ready"
    " ORDER BY type DESC, version DESC LIMIT 1) UNION ALL SELECT n.* FROM live l, LATERAL (SELECT"
    " type::text, version FROM django_jobs_job WHERE status = 'pending' AND ready"
    " AND (type, version) < (l.t, l.v) ORDER BY type DESC, version DESC LIMIT 1) n), "
)
_CLAIM_ANY_QUEUE_OF_MANY_KINDS = (
    "WITH RECURSIVE "
    + _PROMOTE
    + _KINDS_WITH_READY_JOBS
    + _ANY_QUEUE_CANDIDATES.replace(
        "{kinds}",
        f"live l JOIN {_KINDS_LEASED.removeprefix('SELECT * FROM ')} ON k.type = l.t AND k.version = l.v",
    ).replace("{scan}", _SCAN)
    + _CLAIM_TAIL.replace(
        "{walked}",
        "(SELECT django_jobs_claim_index_reads() - wk.before - (SELECT count(*) FROM live)"
        " FROM walk wk)::int",
    ).replace("{promoted}", _COUNT_PROMOTED)
).replace("{queue}", "")
# A paused queue keeps its jobs pending, and its backlog grows while it is paused. A worker that
# serves every queue scans django_jobs_ready, which holds the ready jobs of all queues by kind:
# it would read a paused backlog through at every claim, to take none of it (a million paused
# jobs made each claim half a second). So while a queue is paused, that worker claims with this
# statement instead (the previous claim said so): it scans per queue and kind in
# django_jobs_ready_queue, for the (queue, type, version) that hold ready jobs. A loose index
# scan lists those, one probe each: from one, it seeks to the next, stepping over a queue's
# entries instead of reading them, and a paused queue is left out before its scan. Each probe
# orders by the whole index prefix, so that only django_jobs_ready_queue yields that order; the
# walk starts from a row before any ('' is no queue's name), which matches no kind.
_LIVE_KINDS = (
    "live AS (SELECT ''::text q, ''::text t, 0 v UNION ALL SELECT n.* FROM live l, LATERAL (SELECT"
    " queue::text, type::text, version FROM django_jobs_job WHERE status = 'pending' AND ready"
    " AND (queue, type, version) > (l.q, l.t, l.v) ORDER BY queue, type, version, priority DESC"
    " LIMIT 1) n), "
)
_CLAIM_ANY_QUEUE_BESIDE_PAUSED = (
    f"WITH RECURSIVE {_PROMOTE}{_LIVE_KINDS}candidates AS (SELECT s.* FROM live l"
    f" JOIN ({_KINDS_LEASED}) k ON k.type = l.t AND k.version = l.v CROSS JOIN LATERAL ({_SCAN}) s"
    f" WHERE l.q NOT IN ({_PAUSED_QUEUES}) ORDER BY s.priority DESC, s.available_at, s.id"
    " LIMIT %(limit)s)"
).replace("{queue}", "queue = l.q AND ") + _CLAIM_TAIL.replace("{walked}", "0").replace(
    "{promoted}", _COUNT_PROMOTED
)
# With named queues, the kinds are scanned per queue, in the (queue, type, version, ...) index.
# Each queue offers at most its `room` rows (its free slots, when the worker gives queues slots
# of their own), and the queues take turns: the first row of each queue comes before the second
# of any, in the order of %(queues)s, which the worker rotates from one claim to the next. So a
# backlog in one queue never holds back a job of another, and priorities order jobs within a
# queue. Rows locked for a queue but cut by the outer LIMIT are unlocked when this statement
# commits. A paused queue is left out before its scan: the filter on its rows alone would read
# its whole backlog to find nothing.
# The queue of a scan is left out before the scan when paused (the filter on q.name), so its rows
# are not tested again.
_NAMED_QUEUES_CANDIDATES = (
    f"{_WALK}candidates AS (SELECT c.* FROM walk wk CROSS JOIN unnest(%(queues)s::text[], %(rooms)s::int[])"
    " WITH ORDINALITY AS q(name, room, turn) CROSS JOIN LATERAL ("
    f" SELECT x.*, row_number() OVER () AS rank FROM ({_MERGED} LIMIT q.room) x) c"
    f" WHERE q.name NOT IN ({_PAUSED_QUEUES})"
    " ORDER BY c.rank, q.turn LIMIT %(limit)s)"
).replace("{walk_first}", " WHERE wk.before IS NOT NULL")
_CLAIM_NAMED_QUEUES = (
    _claim_sql(_NAMED_QUEUES_CANDIDATES, f"({_KINDS_LEASED}) k", _SCAN, promotes=True)
    .replace(_NOT_PAUSED, "")
    .replace("{queue}", "queue = q.name AND ")
)
# The same from places, one per queue and kind: the places travel as arrays of queues × kinds,
# the queues in their turns' order; each queue's scans read its row. Each arm orders by the queue
# first and tests it as `= ANY(ARRAY[...])`, so that only django_jobs_ready_queue yields its order
# (`queue = q.name` would make the queue a constant of the scan, and django_jobs_ready, with the
# queue as a filter, would step over the other queues' entries, the dead ones included).
_NAMED_KINDS_IN_ROOM = (
    "unnest(%(kind_types)s::text[], %(kind_versions)s::int[], %(kind_leases)s::float8[],"
    " (%(kind_fp)s::int[])[q.turn:q.turn], (%(kind_fa)s::float8[])[q.turn:q.turn],"
    " (%(kind_fi)s::bigint[])[q.turn:q.turn]) AS k(type, version, lease, fp, fa, fi)"
    " CROSS JOIN LATERAL (SELECT {kind_room} AS room) kr"
)
_NAMED_SCAN_FROM_PLACE = _SCAN_FROM_PLACE.replace(" ORDER BY ", " ORDER BY queue, ").replace(
    "{queue}", "queue = ANY(ARRAY[q.name]) AND "
)
_CLAIM_NAMED_QUEUES_FROM_PLACES = (
    _claim_sql(_NAMED_QUEUES_CANDIDATES, _NAMED_KINDS_IN_ROOM, _NAMED_SCAN_FROM_PLACE, promotes=False)
    .replace(_NOT_PAUSED, "")
    .replace("{queue}", "queue = q.name AND ")
)

# ---- concurrency keys -----------------------------------------------------------------------
#
# The candidate scan leaves out keys at their limit as this statement's snapshot sees them
# (their running jobs counted by the partial index django_jobs_key_running), so that a busy key
# does not fill a batch with jobs that cannot start. That snapshot may be stale, so the
# decision is django_jobs_admit_keys's (migration 0007): it locks each key's row, with SKIP
# LOCKED, then counts the key's running jobs in a snapshot taken after the lock. It runs once
# per claim, and only for a batch that holds a keyed job: `(SELECT ...)` is an InitPlan,
# evaluated when the OR first needs it. Outcome writes touch none of this and wait for nothing.
_KEY_ROOM_FILTER = (
    " AND (concurrency_key IS NULL"
    " OR concurrency_limit > django_jobs_running_with_key(type, concurrency_key))"
)
_ADMIT_KEYS = (
    ", admitted AS (SELECT * FROM candidates WHERE concurrency_key IS NULL OR id = ANY((SELECT"
    " django_jobs_admit_keys(array_agg(id), array_agg(type), array_agg(concurrency_key),"
    " array_agg(concurrency_limit)) FROM (SELECT * FROM candidates WHERE concurrency_key IS NOT NULL"
    " ORDER BY priority DESC, available_at, id) AS keyed)::bigint[]))"
)

# ---- rate limits ----------------------------------------------------------------------------
#
# Only in the statement of a worker that knows a rate-limited type. django_jobs_admit_starts
# (migration 0007) takes starts from each type's window row, locked, for the chosen jobs of
# rate-limited types that start now; like the keys' function, it runs only for a batch that
# holds such a job. A rate-limited job is never prefetched: its claim is its start, and the
# start the window counts. The window rows are created before the claims need them (see
# open_rate_windows). The candidate scan leaves out types whose window is full as the snapshot
# sees it: its starts are in order, so it is full when its COUNT-th latest start is within the
# window (a subscript out of range is NULL: not full). The test is a NOT IN of a hashed
# subquery: `<> ALL(ARRAY(...))` makes the planner expect no row to pass, and trade the
# ordered scan of the claim index for a sequential scan and a sort.
_RATE_LIMITS = (
    "unnest(%(rate_types)s::text[], %(rate_counts)s::int[], %(rate_seconds)s::float8[]) r(t, cap, secs)"
)
_RATE_ROOM_FILTER = (
    f" AND type::text NOT IN (SELECT t FROM django_jobs_ratewindow JOIN {_RATE_LIMITS} ON t = type"
    " WHERE starts[cardinality(starts) - cap + 1] > now() - make_interval(secs => secs))"
)
# A rate-limited kind offers no more rows than its window has starts left: PostgreSQL computes
# that once per kind, before the scan, and a kind with none left is not scanned at all (LIMIT 0
# reads nothing). The test on each row alone would read the type's whole backlog, row by row, to
# find that none may start; and while the window has room, the kind's backlog would fill the
# batch with jobs the admission then drops.
_RATE_KIND_ROOM = (
    "least({room}, coalesce((SELECT greatest(r.cap - cardinality("
    f"django_jobs_recent_starts(w.starts, r.secs)), 0) FROM {_RATE_LIMITS}"
    " JOIN django_jobs_ratewindow w ON w.type = r.t WHERE r.t = k.type), {room}))"
)
_ADMIT_RATES = (
    ", next AS (SELECT id, start, pos, lease FROM chosen WHERE type::text <> ALL(%(rate_types)s::text[])"
    " OR start AND id = ANY((SELECT django_jobs_admit_starts(array_agg(id), array_agg(type),"
    " array_agg(queue), %(rate_types)s::text[], %(rate_counts)s::int[], %(rate_seconds)s::float8[])"
    " FROM chosen"
    " WHERE start AND type::text = ANY(%(rate_types)s::text[]))::bigint[]))"
)
_NO_RATES = ", next AS (SELECT id, start, pos, lease FROM chosen)"
_ENSURE_RATE_WINDOWS = (
    "INSERT INTO django_jobs_ratewindow (type, starts) SELECT unnest(%s::text[]), '{}' ON CONFLICT DO NOTHING"
)


# ---- the outlook ----------------------------------------------------------------------------
#
# What an idle worker reads instead of trusting notifications alone (see listener.py): in how
# many seconds the next job it could claim is due (NULL: none pending), and which queues are
# paused. Two places hold its next job, read per kind (and per queue):
# - the claim index: due now (0) if a row passes the claim's conditions. A ready job was due at
#   its write, so there is nothing to wait for there (a job whose due time an UPDATE of your own
#   moved later while it was ready is found due by a periodic check); a job left out because
#   its key or rate window is full, or of a paused queue, is not waited for: the claim would
#   pass it over too (a key or a window that frees up notifies);
# - django_jobs_later: the first job scheduled for later, of a queue that is not paused. When it
#   is due, the next claim promotes it (see _PROMOTE).
# Kinds the worker does not run, and versions it cannot read, are not read at all. Both reads
# are in their index's order: for an EXISTS, PostgreSQL may prefer reading the table until it
# finds a row, which for each kind with no pending job means the whole table.
_OUTLOOK = """
SELECT least(
    (SELECT min((SELECT 0.0::float8 FROM django_jobs_job
                 WHERE {ready_queue}type = k.type AND version = k.version AND status = 'pending' AND ready
                   AND {row_conditions} ORDER BY priority DESC, available_at, id LIMIT {kind_room}))
     FROM {ready_kinds}),
    (SELECT extract(epoch FROM min((SELECT available_at FROM django_jobs_job
                 WHERE {queue}type = k.type AND version = k.version AND status = 'pending' AND NOT ready
                   {not_paused} ORDER BY available_at LIMIT 1)) - now())::float8
     FROM ({kinds}) k{of_queues})),
    ARRAY(SELECT name::text FROM django_jobs_queue_state WHERE paused_at IS NOT NULL)
"""
_OF_QUEUES = f" CROSS JOIN unnest(%(queues)s::text[]) AS q(name) WHERE q.name NOT IN ({_PAUSED_QUEUES})"
# A worker of every queue while a queue is paused reads its ready jobs per queue and kind, as
# its claim does (see _LIVE_KINDS), not through the paused backlog.
_LIVE_READY_KINDS = (
    f"live l JOIN ({{kinds}}) k ON k.type = l.t AND k.version = l.v WHERE l.q NOT IN ({_PAUSED_QUEUES})"
)


@dataclass(frozen=True, slots=True)
class Outlook:
    """What an idle worker learns by reading, not by listening."""

    #: Seconds until the next job the worker could claim is due (0 or less: due now), or None
    #: when none is pending.
    due_in: float | None
    #: The queues paused now (of any worker).
    paused: frozenset[str]


#: The statement's parameters that never change from one claim to the next (see _array_text).
_FIXED_ARRAYS = (
    "types", "versions", "oldest", "kind_types", "kind_versions", "kind_leases",
    "rate_types", "rate_counts", "rate_seconds",
)  # fmt: skip


def _array_text(values: Sequence[str | int | float]) -> str:
    """``values`` as PostgreSQL writes an array (``{"a",2}``): a string sent as is, which the
    server reads as the array type its cast names."""
    items = (
        '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' if isinstance(value, str) else repr(value)
        for value in values
    )
    return "{" + ",".join(items) + "}"


def outlook(statement: ClaimStatement) -> Outlook:
    """Read the next due time among the jobs ``statement`` claims, and the paused queues."""
    with bound_cursor(jobs_settings.DATABASE) as cursor:
        cursor.execute(statement.outlook_sql, statement.outlook_params())
        row = cursor.fetchone()
    assert row is not None  # one row, always: a SELECT without FROM
    due_in, paused = row
    statement.queues_paused = bool(paused)
    return Outlook(due_in, frozenset(paused))


class ClaimStatement:
    """The claim of one worker: built once for its queues and the job types it knows.

    ``versions`` maps each type to the newest payload version the worker can decode, and
    ``oldest`` to the oldest its upcasters reach (default: 1); ``leases`` maps it to the lease
    its executions get (default ``LEASE_TIMEOUT``); ``rate_limits`` to the type's rate limit,
    if it has one. Concurrency keys need nothing: their limits are stored on the jobs.
    """

    def __init__(
        self,
        worker_id: str,
        queues: Sequence[str] | None,
        versions: dict[str, int],
        leases: dict[str, float] | None = None,
        oldest: dict[str, int] | None = None,
        rate_limits: dict[str, RateLimit] | None = None,
    ) -> None:
        if not versions:
            raise ValueError("a worker that knows no job type can claim nothing")
        names = sorted(versions)
        leases = leases or {}
        oldest = oldest or {}
        kinds = [(name, v) for name in names for v in range(oldest.get(name, 1), versions[name] + 1)]
        # Each statement with the room each kind's scan has: the claim's limit, or the queue's.
        templates = (
            [(_CLAIM_NAMED_QUEUES, "q.room"), (_CLAIM_NAMED_QUEUES_FROM_PLACES, "q.room")]
            if queues
            else [
                (
                    _CLAIM_ANY_QUEUE_OF_MANY_KINDS if len(kinds) > MANY_KINDS else _CLAIM_ANY_QUEUE,
                    "%(limit)s",
                ),
                (_CLAIM_ANY_QUEUE_FROM_PLACES, "%(limit)s"),
                (_CLAIM_ANY_QUEUE_BESIDE_PAUSED, "%(limit)s"),
            ]
        )
        rates = {name: limit for name, limit in (rate_limits or {}).items() if name in versions}
        # The filters of keys and rate windows complete the outlook's row conditions; the
        # rate-limit parts are left out of a worker that needs none.
        room = _KEY_ROOM_FILTER + (_RATE_ROOM_FILTER if rates else "")
        admit_rates = _ADMIT_RATES if rates else _NO_RATES
        kind_room = _RATE_KIND_ROOM if rates else "{room}"
        statements = [
            template.replace("{kind_room}", kind_room)
            .replace("{room}", kind_rows)
            .replace("{key_filter}", _KEY_ROOM_FILTER)
            .replace("{admit_keys}", _ADMIT_KEYS)
            .replace("{admit_rates}", admit_rates)
            for template, kind_rows in templates
        ]
        outlook = (
            _OUTLOOK.replace("{kind_room}", kind_room.replace("{room}", "1"))
            .replace("{of_queues}", _OF_QUEUES if queues else "")
            .replace("{queue}", "queue = q.name AND " if queues else "")
            .replace("{row_conditions}", _ROW_CONDITIONS.replace("{room_filters}", room))
            .replace("{not_paused}", _NOT_PAUSED)
        )
        self._usual_outlook = (
            outlook.replace("{ready_queue}", "queue = q.name AND " if queues else "")
            .replace("{ready_kinds}", "({kinds}) k" + (_OF_QUEUES if queues else ""))
            .replace("{kinds}", _KINDS)
        )
        self._outlook_beside_paused = (
            self._usual_outlook
            if queues
            else "WITH RECURSIVE "
            + _LIVE_KINDS.removesuffix(", ")
            + outlook.replace("{ready_queue}", "queue = l.q AND ")
            .replace("{ready_kinds}", _LIVE_READY_KINDS)
            .replace("{kinds}", _KINDS)
        )
        # Per-type values travel as arrays aligned with `types`: the statement's text stays the
        # same size however many types a worker knows, so psycopg keeps its parsed form cached
        # (it caches statements up to 4 KiB; one CASE branch per type outgrew that).
        self._usual = statements[0]
        #: The claim from the places this worker's claims stopped.
        self._from_places = statements[1]
        #: The statement of a worker that serves every queue while some queue is paused.
        self._beside_paused = statements[0] if queues else statements[2]
        #: The same two without the promotion of due scheduled jobs (see PROMOTE_EVERY).
        self._usual_unpromoting = _without_promotion(self._usual)
        self._beside_paused_unpromoting = _without_promotion(self._beside_paused)
        #: Whether the last claim saw a paused queue (only a worker of every queue cares).
        self.queues_paused = False
        self._promotion_wanted = True
        self._promoted_at = -math.inf  # monotonic
        self._params: dict[str, Any] = {
            "worker": worker_id,
            "types": names,
            "queues": list(queues or []),
            "versions": [versions[name] for name in names],
            "newest": max(versions.values()),
            "oldest": [oldest.get(name, 1) for name in names],
        }
        self._params["kind_types"] = [name for name, _ in kinds]
        self._params["kind_versions"] = [v for _, v in kinds]
        self._params["kind_leases"] = [
            float(leases.get(name, jobs_settings.LEASE_TIMEOUT)) for name, _ in kinds
        ]
        #: Where this worker's claims stopped in each kind, and whether the next claim starts there.
        self.positions = ClaimPositions(kinds, queues)
        #: The rate-limited types this statement claims, whose window rows must exist.
        self.rate_limited = sorted(rates)
        if rates:
            self._params["rate_types"] = self.rate_limited
            self._params["rate_counts"] = [rates[name].count for name in self.rate_limited]
            self._params["rate_seconds"] = [rates[name].seconds for name in self.rate_limited]
        # These arrays are the same at every claim: bound as the text of an array, rendered once
        # here, since psycopg dumping them element by element cost ~450 µs a claim (70 types).
        # The statement casts each where it reads it.
        for name in _FIXED_ARRAYS:
            if name in self._params:
                self._params[name] = _array_text(self._params[name])

    @property
    def sql(self) -> str:
        """The statement a claim that reads every kind from its head runs: the usual one, or,
        for a worker of every queue while the last claim saw a paused queue, the one that steps
        over paused backlogs. It first promotes the due jobs scheduled for later."""
        return self._beside_paused if self.queues_paused else self._usual

    @property
    def sql_without_promotion(self) -> str:
        """:attr:`sql` without the promotion of due scheduled jobs."""
        return self._beside_paused_unpromoting if self.queues_paused else self._usual_unpromoting

    def promotion_due(self, now: float | None = None) -> bool:
        """Whether the next claim that reads from the heads promotes due scheduled jobs (see
        PROMOTE_EVERY)."""
        now = time.monotonic() if now is None else now
        return self._promotion_wanted or now - self._promoted_at >= PROMOTE_EVERY

    def claims_ended(self, *, promoted: int | None, short: bool) -> None:
        """Note a claim statement: how many jobs it promoted (None: it promoted none, by
        choice), and whether it came back with room (fewer jobs than its limit)."""
        if promoted is not None:
            self._promoted_at = time.monotonic()
        self._promotion_wanted = short or bool(promoted)

    def sql_from_places(self) -> str | None:
        """The statement that reads each kind from where this worker's claims stopped, when
        the next claim may (see transitions.positions), else None."""
        # A worker of every queue claims per queue while one is paused: from the heads.
        if (self.queues_paused and not self.queues) or self.positions.sweep_due():
            return None
        return self._from_places

    @property
    def outlook_sql(self) -> str:
        """The outlook of this worker (see ``_OUTLOOK``), chosen as :attr:`sql` is."""
        return self._outlook_beside_paused if self.queues_paused else self._usual_outlook

    @property
    def queues(self) -> list[str]:
        """The named queues this statement claims from, in their unrotated order (empty: any)."""
        queues: list[str] = self._params["queues"]
        return queues

    def outlook_params(self) -> dict[str, Any]:
        return self._params

    def params(
        self, limit: int, start_now: int | None = None, rooms: Sequence[int] | None = None, turn: int = 0
    ) -> dict[str, Any]:
        queues = self.queues
        room = list(rooms) if rooms is not None else [limit] * len(queues)
        if len(room) != len(queues):
            raise ValueError("one room per queue")
        first = turn % len(queues) if queues else 0  # the queue whose turn it is comes first
        return {
            **self._params,
            "queues": queues[first:] + queues[:first],
            "rooms": room[first:] + room[:first],
            "limit": limit,
            "start_now": limit if start_now is None else start_now,
        }


def claim(
    statement: ClaimStatement,
    limit: int,
    start_now: int | None = None,
    rooms: Sequence[int] | None = None,
    turn: int = 0,
) -> list[Claim]:
    """Claim up to ``limit`` jobs, committed before this returns, best priority first.

    The first ``start_now`` (default: all) are counted as started: they go to idle threads.
    With named queues, ``rooms`` caps what each queue may give (default: ``limit``), and
    ``turn`` rotates which queue comes first. A claim that promoted jobs scheduled for later
    (due now) claims once more: they were not claimable in its own snapshot. One that skipped
    the promotion (see PROMOTE_EVERY) and came back short promotes and claims again: fewer jobs
    than ``limit`` always means that nothing more was claimable.
    """
    claims: list[Claim] = []

    def claim_rest(promotes: bool) -> int | None:
        """Claim what is left of the limit (and of the starts and rooms); how many it promoted."""
        left_rooms = rooms
        if rooms is not None:
            taken = Counter(c.queue for c in claims)
            left_rooms = [max(0, room - taken[q]) for q, room in zip(statement.queues, rooms, strict=True)]
        left = None if start_now is None else max(0, start_now - len(claims))
        params = statement.params(limit - len(claims), left, left_rooms, turn)
        more, promoted = _claim_once(statement, params, promotes=promotes)
        claims.extend(more)
        statement.claims_ended(promoted=promoted, short=len(claims) < limit)
        if promoted:
            # Promoted jobs keep their due times, which may lie before where claims stopped.
            statement.positions.want_sweep()
        return promoted

    promoted = claim_rest(promotes=statement.promotion_due())
    if promoted is None and statement.positions.last_swept and len(claims) < limit:
        # It read from the heads and came back short without promoting (a claim from the places
        # never promotes): a due job may be waiting to be promoted.
        promoted = claim_rest(promotes=True)
    if promoted and len(claims) < limit:
        claim_rest(promotes=True)
    return claims


def _claim_once(
    statement: ClaimStatement, params: dict[str, Any], *, promotes: bool
) -> tuple[list[Claim], int | None]:
    """One claim statement: the jobs it claimed, and how many it promoted (None: it did not
    promote; a claim from the places never does)."""
    from_places = statement.sql_from_places()
    if from_places is not None:
        sql, promotes = from_places, False
        params = {**params, **statement.positions.params(params["queues"])}
    else:
        sql = statement.sql if promotes else statement.sql_without_promotion
    started = time.perf_counter()
    with bound_cursor(jobs_settings.DATABASE, prepared=True) as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    seconds = time.perf_counter() - started
    # The counts, in the version and attempt columns of the row with no id.
    (counts,) = [row for row in rows if row[0] is None]
    promoted = counts[-1] if promotes else None
    # The next claim picks its statement by what this one saw: a pause or a resume is followed
    # from the claim after it (until then, the claim is right, only slower or needlessly careful).
    statement.queues_paused = counts[3] > 0
    rows = [row for row in rows if row[0] is not None]
    statement.positions.claimed(
        ((row[1], row[2], row[3], row[10], row[15], row[0]) for row in rows),
        # Below 0 when the walk of the kinds with ready jobs (see MANY_KINDS) read the rows of
        # the entries it found from the table: the count takes one off per kind all the same.
        walked=max(0, counts[5]),
        swept=from_places is None,
        seconds=seconds,
    )
    # RETURNING follows no order: put the rows back in the claim's (best first; with named
    # queues, the queues' turns), the counted ones first since they are meant for idle threads.
    rows.sort(key=lambda row: (not row[13], row[-1]))
    # The due time, exact in a float8 (microseconds since the epoch fit in its 53 bits), places
    # the claim (see transitions.positions); the wait is computed from it.
    claims = [Claim(*row[:15]) for row in rows]
    for taken, row in zip(claims, rows, strict=True):
        taken.waited = row[14] - row[15]
        taken.has_deadline = row[16]
    return claims, promoted


def open_rate_windows(types: Sequence[str]) -> None:
    """Create the window rows of these rate-limited types, if missing.

    The claim starts no job of a type whose window row is missing: a worker creates its
    types' rows before its first claim, and the reaper creates them again if they were deleted.
    """
    if types:
        with connections[jobs_settings.DATABASE].cursor() as cursor:
            cursor.execute(_ENSURE_RATE_WINDOWS, [list(types)])
