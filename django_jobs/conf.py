"""Settings: one dict, ``DJANGO_JOBS = {...}``, read lazily so ``override_settings`` works.

Over 300 lines: this is the table of every setting. Each is declared once below, as a
typed attribute of ``Settings`` (its default, how it is read, the rule its value keeps and its
meaning). From that one declaration come ``DEFAULTS``, ``jobs_settings.<KEY>``, the system check
of its value (``checks.py`` keeps only the checks that relate several settings, or other state)
and the row of docs/configuration.md (tests/unit/test_settings_table.py fails when the page
differs; ``python -m tests.unit.test_settings_table`` rewrites it). Durations are seconds; floats
are allowed. The meaning of each key follows, generated from the table.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from django.conf import settings

from django_jobs.names import QUEUE_RE
from django_jobs.setting import (
    Setting,
    durations_by_status,
    is_bool,
    is_fraction,
    is_positive_integer,
    optional,
    optional_seconds,
    or_none,
    patterns,
    positive_integer,
    rule,
    seconds,
    string_dict,
    string_set,
    string_tuple,
)

DAY = 24 * 3600.0

#: A shorter bearer token is guessable: the metrics view would be open to anyone who tries.
MIN_TOKEN_CHARS = 16

#: Key names whose values are masked in the console (searched as regular expressions).
DEFAULT_SENSITIVE_PAYLOAD_KEYS = (
    r"passw",
    r"pwd",
    r"secret",
    r"token",
    r"authori[sz]ation",
    r"api[-_]?key",
    r"private[-_]?key",
    r"credential",
    r"cookie",
    r"signature",
)

#: How long each finished status is kept by default; None keeps it forever.
DEFAULT_RETENTION: dict[str, float | None] = {
    "completed": 7 * DAY,
    "skipped": 7 * DAY,
    "cancelled": 30 * DAY,
    "failed": None,
}

# The connection options that None turns off (django_jobs/runtime/connectivity.py) share a rule.
_CONNECTION_OPTION = optional_seconds("django_jobs.E020", "the libpq and kernel default")
# The liveness limits are derived from the intervals while None.
_LIVENESS_LIMIT = optional_seconds("django_jobs.E031", "derived from the intervals")


#: The alias the job tables are read from by the code running now, when that is not
#: ``DATABASE``: set only while the console or the metrics view reads for a page
#: (``django_jobs.reads.replica.console_reads``), never while anything writes. Every read of the
#: job tables names ``jobs_settings.DATABASE``; this is how a page's reads, down to those of
#: ``reads/`` and ``observe/``, reach ``CONSOLE_DATABASE`` without each taking an alias.
READING_FROM: ContextVar[str | None] = ContextVar("django_jobs_reading_from", default=None)


def _reading_from(alias: str) -> str:
    """The alias a read of the job tables goes to now: ``alias``, unless a page reads elsewhere."""
    return READING_FROM.get() or alias


def _is_database_alias(value: Any) -> bool:
    return isinstance(value, str) and value in settings.DATABASES


def _is_queue_name(value: Any) -> bool:
    return isinstance(value, str) and bool(QUEUE_RE.match(value))


def _is_token(value: Any) -> bool:
    return isinstance(value, str) and len(value.strip()) >= MIN_TOKEN_CHARS


def _retention(value: Any) -> dict[str, float | None]:
    """The statuses the project sets, over the defaults of the others."""
    merged = dict(DEFAULT_RETENTION)
    merged.update(value)
    return merged


def _stall_limit(s: Settings) -> float:
    return max(30.0, 3 * s.HEARTBEAT_INTERVAL)


def _outage_limit(s: Settings) -> float:
    return max(60.0, 2 * s.LEASE_TIMEOUT)


def _stuck_limit(s: Settings) -> float:
    return max(5.0, s.HEARTBEAT_INTERVAL)


class Settings:
    """Typed, lazy view of ``settings.DJANGO_JOBS`` with the defaults filled in: the table."""

    DATABASE = Setting(
        "default",
        str,
        None,  # check_database: the alias, the routers and the vendor (E007, E008, E050)
        "Alias of the database holding the job tables. Another alias needs `DATABASE_ROUTERS = "
        '["django_jobs.routers.JobsRouter"]` (`django_jobs.E050` checks the routing) and means '
        "`enqueue()` is no longer atomic with your business writes (`django_jobs.W001`); see "
        "[scaling](scaling.md#the-job-tables-on-a-database-of-their-own).",
        per_access=_reading_from,
    )
    CONSOLE_DATABASE = Setting(
        None,
        optional(str),
        rule(
            or_none(_is_database_alias),
            "django_jobs.E051",
            "is {value!r}, not an alias of DATABASES.",
            hint="Name a streaming replica of the jobs database, as an alias of DATABASES, or None.",
        ),
        "Alias of a streaming replica of the jobs database that the console's pages (the list, a "
        "job's page, the dashboard, a workflow's page, the confirmation pages) and the metrics "
        "view read from, each page saying how far behind the replica is. Every action still runs "
        "on `DATABASE`, and first reads the job again there: it is refused when the job is no "
        "longer as the page showed it. `None`: everything reads `DATABASE`. See "
        "[operations](operations/console.md#console-reads-from-a-replica).",
    )
    NOTIFY = Setting(
        True,
        bool,
        rule(is_bool, "django_jobs.E015", "must be True or False."),
        "Workers LISTEN for new jobs on one connection each and start them within milliseconds; "
        "jobs scheduled for later wake them when due. `False`: polling only, every "
        "`POLL_INTERVAL`. A worker whose listening connection goes through a pooler in "
        "transaction mode, which cannot hold a LISTEN, polls by itself and says so "
        "(`django_jobs.W006`): give it `LISTEN_DATABASE` (see "
        "[scaling](scaling.md#pgbouncer)).",
    )
    LISTEN_DATABASE = Setting(
        None,
        optional(str),
        rule(
            or_none(_is_database_alias),
            "django_jobs.E052",
            "is {value!r}, not an alias of DATABASES.",
            hint="Name an alias that connects to the jobs database's PostgreSQL directly, or None.",
        ),
        "Alias of a connection to the jobs database that goes to PostgreSQL directly (or through "
        "a pool in session mode), used only for each worker's one `LISTEN` connection; claims, "
        "heartbeats and outcomes stay on `DATABASE`. For a `DATABASE` behind PgBouncer in "
        "transaction mode: jobs still start within milliseconds of their commit. `manage.py "
        "check --database` warns when it reaches another database than `DATABASE` "
        "(`django_jobs.W007`) or a transaction pool itself (`W006`). `None`: `DATABASE`. See "
        "[scaling](scaling.md#pgbouncer).",
    )
    POLL_INTERVAL = Setting(
        1.0,
        float,
        seconds("django_jobs.E003"),
        "How often a worker looks for jobs when nothing wakes it. With `NOTIFY = False`, or while"
        " its listening connection is down, it claims; an idle listening worker reads instead "
        "when the next job it could claim is due and which queues are paused (one indexed read), "
        "so a job it never heard of waits at most this long, and a scheduled one starts when due "
        "(see docs/workers.md).",
    )
    BATCH_SIZE = Setting(
        100,
        int,
        positive_integer("django_jobs.E004"),
        "Most jobs one claim statement takes; a worker of short jobs holds up to two batches (it "
        "claims the next while it runs one), and writes outcomes a batch at a time.",
    )
    PREFETCH_SECONDS = Setting(
        0.05,
        float,
        seconds("django_jobs.E003"),
        "How much work, in observed run time, a worker may hold claimed but not yet started.",
    )
    OUTCOME_FLUSH_INTERVAL = Setting(
        0.01,
        float,
        seconds("django_jobs.E003"),
        "Finished executions are written at least this often.",
    )
    HEARTBEAT_INTERVAL = Setting(
        10.0,
        float,
        seconds("django_jobs.E003"),
        "How often a worker extends the lease of the jobs it holds.",
    )
    LEASE_TIMEOUT = Setting(
        60.0,
        float,
        seconds("django_jobs.E003"),
        "How long an execution owns its job without a sign of life (a job type may set its own "
        "`lease_timeout`). Once the lease expires, the reaper takes the job back.",
    )
    PROGRESS_INTERVAL = Setting(
        1.0,
        float,
        seconds("django_jobs.E003"),
        "`ctx.progress()` writes at most this often (and always when done reaches total).",
    )
    MAX_CHECKPOINT_BYTES = Setting(
        64 * 1024,
        int,
        positive_integer("django_jobs.E004"),
        "Largest checkpoint `ctx.save_checkpoint()` accepts (its UTF-8 JSON encoding); past it, "
        "or for data that is not plain JSON, the handler gets `InvalidCheckpoint` and nothing is "
        "written.",
    )
    REAPER_INTERVAL = Setting(
        30.0,
        float,
        seconds("django_jobs.E003"),
        "How often stale running jobs are recovered and old finished jobs pruned.",
    )
    MAX_PAYLOAD_BYTES = Setting(
        256 * 1024,
        int,
        positive_integer("django_jobs.E004"),
        "Largest accepted payload, as UTF-8 JSON.",
    )
    MAX_RESULT_BYTES = Setting(
        64 * 1024,
        int,
        positive_integer("django_jobs.E004"),
        "Largest return value stored for a handler or a task (its UTF-8 JSON encoding). A larger "
        "one, or one that is not plain JSON, ends the job `failed` with code `RESULT_INVALID`; "
        "the worker carries on.",
    )
    DEFAULT_QUEUE = Setting(
        "default",
        str,
        rule(
            _is_queue_name,
            "django_jobs.E014",
            "is {value!r}, not a queue name.",
            hint="Letters, digits and _ . : -, at most 100 characters.",
        ),
        "Queue of job types that name none.",
    )
    QUEUES = Setting(
        None,
        optional(string_set),
        None,  # check_declared_queues, beside the queues it holds the project to (E070)
        'The queue names your project uses, e.g. `["default", "emails", "reports"]`. Declared, '
        "`enqueue()` (and `enqueue_many()`, Django tasks, schedules) refuses any other queue with"
        " `UnknownQueue` — an `InvalidOption` naming the declared queues and the closest one "
        "(`queue 'defualt' is not declared …: did you mean 'default'?`) — and nothing is written:"
        " a typo would otherwise create a queue no worker serves. `manage.py check` holds the "
        "rest to it: `E070` the setting itself, `E071` each `@job(queue=…)`, `E072` each Tasks "
        "backend's `QUEUES`, `E073` `DEFAULT_QUEUE` and each schedule's `queue`; `runjobs "
        "--queue` refuses to serve any other (exit status 2). `None`: any valid queue name is "
        "accepted.",
    )
    DEFAULT_MAX_ATTEMPTS = Setting(
        5,
        int,
        positive_integer("django_jobs.E004"),
        "Attempts of job types that name none.",
    )
    BACKOFF_BASE = Setting(
        2.0,
        float,
        seconds("django_jobs.E003"),
        "Default retry delay after the first attempt.",
    )
    BACKOFF_CAP = Setting(
        3600.0,
        float,
        seconds("django_jobs.E003"),
        "Longest default retry delay.",
    )
    BACKOFF_JITTER = Setting(
        0.25,
        float,
        rule(is_fraction, "django_jobs.E005", "must be between 0 and 1."),
        "Fraction of a retry delay that is randomised (subtracted), 0–1.",
    )
    MAX_ERROR_CHARS = Setting(
        8000,
        int,
        positive_integer("django_jobs.E004"),
        "Longest sanitized error text stored on a job or event.",
    )
    SENSITIVE_PAYLOAD_KEYS = Setting(
        DEFAULT_SENSITIVE_PAYLOAD_KEYS,
        string_tuple,
        patterns("django_jobs.E011"),
        "Regular expressions searched, case-insensitively, in every key of a payload, checkpoint "
        "or event detail: the console masks their values for people without "
        "`django_jobs.view_sensitive_payload` (job types add exact names with `sensitive=`). "
        "Setting it replaces the list.",
        shown=", ".join(f"`{pattern}`" for pattern in DEFAULT_SENSITIVE_PAYLOAD_KEYS),
    )
    SCHEDULES = Setting(
        {},
        string_dict,
        None,  # check_schedules, entry by entry against the registry (E016 … E019)
        'Periodic jobs declared in settings, by name: `{"sync-crm-eu": {"type": "crm.sync", '
        '"cron": "15 * * * *", "tz": "Europe/Berlin"}}`. Each entry has `type` and either `cron` '
        '(five fields) or `every` (seconds, at least 1), and may set `tz` (`"UTC"`), `payload` '
        "(`{}`), `queue`, `priority`, `misfire_grace` (`None`: a late tick always runs) and "
        '`on_running` (`"skip"` or `"enqueue"`). See [scheduling](scheduling.md).',
    )
    SCHEDULE_TICK_RETENTION = Setting(
        30 * DAY,
        float,
        None,  # read as a float by the scheduler, not checked
        "How long the record of each schedule tick is kept; the latest tick of each schedule is "
        "always kept, since the scheduler resumes from it.",
        shown="`30 days`",
    )
    CHECK_OLDEST_DUE_WARNING = Setting(
        300.0,
        float,
        seconds("django_jobs.E040"),
        "`checkjobs` and the health check warn about a queue whose oldest due job has waited "
        "longer than this (seconds). Must be shorter than the critical level "
        "(`django_jobs.E041`).",
    )
    CHECK_OLDEST_DUE_CRITICAL = Setting(
        1800.0,
        float,
        seconds("django_jobs.E040"),
        "… and report it as critical past this: `checkjobs` exits 1, the health check fails.",
    )
    CHECK_STALE_REAPER_INTERVALS = Setting(
        3.0,
        float,
        seconds("django_jobs.E040"),
        "A running job whose lease expired is a warning; one that expired more than this many "
        "`REAPER_INTERVAL` ago is critical: no reaper is running.",
    )
    CHECK_HORIZON_WARNING = Setting(
        300.0,
        float,
        seconds("django_jobs.E040"),
        "`checkjobs`, the health check and the dashboard warn about a transaction of the jobs "
        "database open longer than this (seconds) that holds the vacuum horizon back (a session "
        "idle in transaction, a long report, a prepared transaction): no dead job row can be "
        "removed while it lasts. See [scaling](scaling.md#a-held-vacuum-horizon).",
    )
    CHECK_HORIZON_XIDS = Setting(
        1_000_000,
        int,
        positive_integer("django_jobs.E004"),
        "… and about a holder whose age in time cannot be read (a standby's "
        "`hot_standby_feedback`, an active replication slot, another role's session while the "
        "reading role lacks `pg_read_all_stats`) once its snapshot is more than this many "
        "transactions old. An inactive replication slot that holds the horizon is always reported.",
    )
    METRICS_TOKEN = Setting(
        None,
        optional(str),
        rule(
            or_none(_is_token),
            "django_jobs.E030",
            f"must be None or a string of at least {MIN_TOKEN_CHARS} characters.",
            hint="Generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
        ),
        "Bearer token a Prometheus scrape of the metrics view (`django_jobs.urls`, "
        "`/jobs/metrics`) or of a worker's `runjobs --metrics-port` presents as `Authorization: "
        "Bearer <token>`; compared in constant time, at least 16 characters (`E030`). Without it "
        "only a signed-in staff user may read the view (an anonymous scrape is refused either "
        "way), and a worker's port answers anyone who reaches it: it listens on `127.0.0.1` "
        "unless `--metrics-host` says otherwise, and warns at start when it listens further "
        "without a token. Never logged: the worker's start-up line shows "
        "`METRICS_TOKEN=[REDACTED]`. See [operations](operations/metrics.md).",
        credential=True,
    )
    METRICS_MAX_LABEL_VALUES = Setting(
        100,
        int,
        positive_integer("django_jobs.E004"),
        "Most distinct values each label of a worker's metrics holds (`type`, `queue`, `code`, "
        "`status`), an integer > 0 (`E004`); the first values seen keep their series, later ones "
        "are counted under `other`. Error codes and queue names are chosen by handlers and "
        "callers: a code holding a job's id would otherwise make a series per job.",
    )
    LIVENESS_STALL_LIMIT = Setting(
        None,
        float,
        _LIVENESS_LIMIT,
        "A worker whose claim loop or heartbeat thread has not turned for this long is not live "
        "(`/healthz` 503, the health file ages).",
        when_none=_stall_limit,
        shown="`None`: 3 × `HEARTBEAT_INTERVAL`, at least 30",
    )
    LIVENESS_OUTAGE_LIMIT = Setting(
        None,
        float,
        _LIVENESS_LIMIT,
        "A worker that could not reach the database for this long is not live; it is not ready "
        "(`/readyz` 503) from the first failure.",
        when_none=_outage_limit,
        shown="`None`: 2 × `LEASE_TIMEOUT`, at least 60",
    )
    LIVENESS_STUCK_LIMIT = Setting(
        None,
        float,
        _LIVENESS_LIMIT,
        "An execution still running this long past its deadline counts as stuck (a thread the "
        "pool already replaced counts at once); a worker with as many stuck executions as slots "
        "is not live.",
        when_none=_stuck_limit,
        shown="`None`: `HEARTBEAT_INTERVAL`, at least 5",
    )
    CONNECT_TIMEOUT = Setting(
        5.0,
        optional(float),
        _CONNECTION_OPTION,
        "A worker process's attempt to connect gives up after this long and is retried (libpq "
        "`connect_timeout`, whole seconds, at least 2), instead of waiting out the kernel's SYN "
        "retries (about two minutes) while the network is cut.",
    )
    TCP_KEEPALIVES_IDLE = Setting(
        5.0,
        optional(float),
        _CONNECTION_OPTION,
        "A worker process's connections send a TCP keepalive probe after this long without "
        "traffic (libpq `keepalives_idle`, whole seconds).",
    )
    TCP_KEEPALIVES_INTERVAL = Setting(
        2.0,
        optional(float),
        _CONNECTION_OPTION,
        "Seconds between two unanswered keepalive probes (libpq `keepalives_interval`).",
    )
    TCP_KEEPALIVES_COUNT = Setting(
        3,
        optional(int),
        rule(or_none(is_positive_integer), "django_jobs.E021", "must be None or an integer > 0."),
        "Unanswered probes after which the peer is given up (libpq `keepalives_count`): with the "
        "defaults, a silent dead peer is noticed within 11 s.",
    )
    TCP_USER_TIMEOUT = Setting(
        10.0,
        optional(float),
        _CONNECTION_OPTION,
        "A worker process's connection whose sent data stays unacknowledged this long is closed "
        "(libpq `tcp_user_timeout`): a statement sent into a network cut fails within seconds and"
        " the worker reconnects, instead of waiting on the kernel's retransmission back-off (up "
        "to about 15 minutes).",
    )
    PREPARED_STATEMENTS = Setting(
        None,
        optional(bool),
        rule(or_none(is_bool), "django_jobs.E022", "must be None, True or False."),
        "Whether `enqueue()` and `enqueue_many()` run their INSERTs, and a worker its claims and "
        "its writes of successes, as prepared statements, which spares PostgreSQL parsing and "
        "planning them at every call (the connection's other statements are left as they are). "
        "`None`: yes, unless the "
        "database alias sets `DISABLE_SERVER_SIDE_CURSORS` (Django's setting for PgBouncer in "
        "transaction mode, where prepared statements break; `runjobs` sets it for itself on a "
        "transaction pool it finds) or `OPTIONS['prepare_threshold']` (then psycopg's own rule "
        "applies). `True` / `False`: always / never. See "
        "[scaling](scaling.md#pgbouncer).",
    )
    STATEMENT_TIMEOUT = Setting(
        30.0,
        optional(float),
        _CONNECTION_OPTION,
        "Longest run of the worker's own statements: claims, heartbeats, outcomes, the reaper's "
        "and the scheduler's passes (a `statement_timeout` set on their connections). Never set "
        "on the connections handlers use. Not set on an alias pooled in transaction mode "
        "(`DISABLE_SERVER_SIDE_CURSORS`), where it would stay on a server connection other "
        "clients get: set it on the workers' role there (see [scaling](scaling.md#pgbouncer)).",
    )
    RETENTION = Setting(
        DEFAULT_RETENTION,
        _retention,
        durations_by_status(tuple(DEFAULT_RETENTION), "django_jobs.E012", "django_jobs.E013"),
        "How long finished jobs are kept, per status; `None` keeps them.",
        shown='`{"completed": 7 days, "skipped": 7 days, "cancelled": 30 days, "failed": None}`',
    )


#: Every setting, in the order of docs/configuration.md.
TABLE: tuple[Setting[Any], ...] = tuple(v for v in vars(Settings).values() if isinstance(v, Setting))

DEFAULTS: dict[str, Any] = {s.name: s.default for s in TABLE}

#: Settings whose values are credentials: the worker's start-up log, and anything else that
#: lists the settings, names them without their values.
CREDENTIAL_SETTINGS = frozenset(s.name for s in TABLE if s.credential)

jobs_settings = Settings()


def primary_database() -> str:
    """``DATABASE`` as set, even while a page reads from ``CONSOLE_DATABASE``: where the job
    tables are written, and where what only the primary knows is read."""
    return str(Settings.DATABASE.raw())


def _docstring_entry(s: Setting[Any]) -> str:
    return f"``{s.name}`` ({s.default_text()})\n    {s.doc}"


__doc__ = "\n\n".join([__doc__ or "", *map(_docstring_entry, TABLE)])
