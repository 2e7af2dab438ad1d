"""System checks. IDs are stable: django_jobs.E001 … and django_jobs.W001 …

The check of each setting's own value comes from its rule in the table of ``django_jobs.conf``;
here are the checks that relate settings to one another or to other state (databases, routers,
job types, schedules, queues, Tasks backends).

Over 300 lines: every check the app registers is here, so that their IDs are read, and kept
unique, in one place.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections, router

from django_jobs.conf import DEFAULTS, TABLE
from django_jobs.errors import undeclared_queue
from django_jobs.names import QUEUE_RE
from django_jobs.setting import user_settings

if TYPE_CHECKING:
    from django_jobs.runtime.pooler import Survey


@register(Tags.compatibility)
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """``DJANGO_JOBS``: a dict of known keys (E001, E002), each value keeping its rule in the
    table of ``django_jobs.conf``, and the settings that bound one another (E006, E041).
    Messages come in the order of their IDs."""
    user = getattr(settings, "DJANGO_JOBS", {})
    if not isinstance(user, dict):
        return [Error("DJANGO_JOBS must be a dict.", id="django_jobs.E001")]
    errors: list[CheckMessage] = [
        Error(
            f"DJANGO_JOBS has an unknown key {key!r}.",
            hint="Known keys: " + ", ".join(sorted(DEFAULTS)),
            id="django_jobs.E002",
        )
        for key in sorted(set(user) - set(DEFAULTS))
    ]
    for setting in TABLE:
        errors.extend(
            Error(problem.message, hint=problem.hint, id=problem.id)
            for problem in setting.problems(user.get(setting.name, setting.default))
        )
    errors.extend(_check_heartbeat_within_lease(user))
    errors.extend(_check_warning_before_critical(user))
    return sorted(errors, key=lambda message: str(message.id))  # stable: table order within an ID


def _valid(user: dict[str, Any], *names: str) -> bool:
    """Whether each of ``names`` keeps its own rule (a relation between bad values is noise)."""
    return all(not s.problems(user.get(s.name, s.default)) for s in TABLE if s.name in names)


def _check_heartbeat_within_lease(user: dict[str, Any]) -> list[CheckMessage]:
    """Any two numbers are compared, even one that breaks its own rule (a zero lease is E003
    and E006): a beat that cannot fit in the lease is worth saying whatever else is wrong."""
    lease = user.get("LEASE_TIMEOUT", DEFAULTS["LEASE_TIMEOUT"])
    beat = user.get("HEARTBEAT_INTERVAL", DEFAULTS["HEARTBEAT_INTERVAL"])
    if not (isinstance(lease, int | float) and isinstance(beat, int | float) and beat >= lease):
        return []
    return [
        Error(
            "DJANGO_JOBS['HEARTBEAT_INTERVAL'] must be shorter than LEASE_TIMEOUT, "
            "or every running job would look stale between two beats.",
            id="django_jobs.E006",
        )
    ]


def _check_warning_before_critical(user: dict[str, Any]) -> list[CheckMessage]:
    """The thresholds of ``checkjobs`` and the health check are read only when an alert is due,
    so a typo must fail at start-up, not in the middle of an incident."""
    if not _valid(
        user, "CHECK_OLDEST_DUE_WARNING", "CHECK_OLDEST_DUE_CRITICAL", "CHECK_STALE_REAPER_INTERVALS"
    ):
        return []
    warning = user.get("CHECK_OLDEST_DUE_WARNING", DEFAULTS["CHECK_OLDEST_DUE_WARNING"])
    critical = user.get("CHECK_OLDEST_DUE_CRITICAL", DEFAULTS["CHECK_OLDEST_DUE_CRITICAL"])
    if warning < critical:
        return []
    return [
        Error(
            f"DJANGO_JOBS['CHECK_OLDEST_DUE_WARNING'] ({warning!r}) must be shorter than "
            f"CHECK_OLDEST_DUE_CRITICAL ({critical!r}), or a backlog would turn critical "
            "without a warning first.",
            id="django_jobs.E041",
        )
    ]


@register(Tags.compatibility)
def check_database(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    # A DJANGO_JOBS that is not a dict is E001: the default database is checked meanwhile.
    alias = user_settings().get("DATABASE", DEFAULTS["DATABASE"])
    if alias not in settings.DATABASES:
        return [Error(f"DJANGO_JOBS['DATABASE'] names an unknown alias {alias!r}.", id="django_jobs.E007")]
    messages: list[CheckMessage] = []
    if connections[alias].vendor != "postgresql":
        messages.append(
            Error(
                "django_jobs needs PostgreSQL (SKIP LOCKED, jsonb, partial indexes).",
                id="django_jobs.E008",
            )
        )
    messages.extend(_check_routing(alias))
    messages.extend(_check_prepared_statements(alias))
    if alias != "default":
        messages.append(
            Warning(
                f"Jobs live in database {alias!r}: enqueue() is no longer atomic with writes "
                "to 'default', so a job may exist for a rolled-back business change (or the "
                "reverse).",
                hint="Wrap enqueue() in transaction.atomic(using=...) of the jobs database, "
                "or make jobs tolerate missing entities (SkipJob).",
                id="django_jobs.W001",
            )
        )
    return messages


def _check_prepared_statements(alias: str) -> list[CheckMessage]:
    """Prepared statements forced on for an alias that says it is pooled in transaction mode:
    a statement prepared on one server connection is missing on the next (the enqueue fails),
    or another client's statement of the same name runs instead."""
    if user_settings().get("PREPARED_STATEMENTS") is not True:
        return []
    if not connections[alias].settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    return [
        Warning(
            f"DJANGO_JOBS['PREPARED_STATEMENTS'] is True, but database {alias!r} sets "
            "DISABLE_SERVER_SIDE_CURSORS, Django's setting for a transaction-mode pooler, where "
            "prepared statements fail or run another client's statement.",
            hint="Leave PREPARED_STATEMENTS at None (off for such an alias) unless the pooler "
            "supports prepared statements (PgBouncer 1.21+ with max_prepared_statements).",
            id="django_jobs.W002",
        )
    ]


def _check_routing(alias: str) -> list[CheckMessage]:
    """The project's routers must send django_jobs' models, and their migrations, to ``alias``
    alone: the console, the ORM reads and ``migrate`` go where the routers say."""
    from django_jobs.models import Job

    problems = []
    read, write = router.db_for_read(Job), router.db_for_write(Job)
    if read != alias or write != alias:
        problems.append(f"its models are read from {read!r} and written to {write!r}")
    if not router.allow_migrate_model(alias, Job):
        problems.append(f"migrate would not create its tables on {alias!r}")
    if alias != "default" and router.allow_migrate_model("default", Job):
        problems.append("migrate would create empty job tables on 'default' too")
    if not problems:
        return []
    return [
        Error(
            f"DJANGO_JOBS['DATABASE'] is {alias!r} but the database routers disagree: "
            + "; ".join(problems)
            + ".",
            hint="Add 'django_jobs.routers.JobsRouter' to DATABASE_ROUTERS (before any router "
            "that routes every model), see docs/scaling.md.",
            id="django_jobs.E050",
        )
    ]


@register(Tags.database)
def check_search_indexes(
    app_configs: Sequence[AppConfig] | None = None, databases: Collection[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """A payload field a job type declares searchable without a valid index (W003): the console
    refuses to search by it until the index is built. It asks the database, so it runs where
    Django runs its database checks (``migrate``, ``check --database``), not on every start."""
    alias = user_settings().get("DATABASE", DEFAULTS["DATABASE"])
    if not databases or alias not in databases:
        return []
    from django_jobs.reads.search_fields import IndexState, search_indexes

    try:
        indexes = search_indexes()
    except DatabaseError:
        return []  # unreachable: the command that asked has its own error to show
    return [
        Warning(
            f"Job type(s) {', '.join(index.types)} declare the payload field {index.field!r} "
            f"searchable, but its index {index.name} is {index.state}: a search by it is refused.",
            hint="Run manage.py jobsindexes --create (CREATE INDEX CONCURRENTLY: the job table "
            "stays writable, the build takes a while on millions of jobs).",
            id="django_jobs.W003",
        )
        for index in indexes
        if index.state in (IndexState.MISSING, IndexState.INVALID)
    ]


#: The oldest PostgreSQL major the jobs database may run (E053). From 15 on, ``pg_upgrade`` keeps
#: the database's OID, which is how a restore is told from an upgrade (``restoring``): on an older
#: server every upgrade would hold the jobs as a restore. Django 6 needs 15 too; CI runs 15, 16, 18.
MIN_POSTGRESQL = 15


def server_version_messages(alias: str, version_num: int) -> list[CheckMessage]:
    """E053 when ``version_num`` (``server_version_num``: 150004 is 15.4) is older than
    ``MIN_POSTGRESQL``."""
    if version_num // 10000 >= MIN_POSTGRESQL:
        return []
    found = f"{version_num // 10000}.{version_num % 10000}"
    return [
        Error(
            f"The jobs database {alias!r} runs PostgreSQL {found}; django_jobs needs PostgreSQL "
            f"{MIN_POSTGRESQL} or later.",
            hint=f"Upgrade the server to PostgreSQL {MIN_POSTGRESQL} or later: before {MIN_POSTGRESQL}, "
            "pg_upgrade gives the database a new OID, and every upgrade would hold the jobs as a "
            "restore.",
            id="django_jobs.E053",
        )
    ]


@register(Tags.database)
def check_server_version(
    app_configs: Sequence[AppConfig] | None = None, databases: Collection[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """The jobs database's server is PostgreSQL ``MIN_POSTGRESQL`` or later (E053). It asks the
    server, so it runs where Django runs its database checks (``migrate``, ``check --database``)."""
    alias = user_settings().get("DATABASE", DEFAULTS["DATABASE"])
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []  # E008
    try:
        version_num = int(connection.pg_version)  # type: ignore[attr-defined]
    except DatabaseError:
        return []  # unreachable, or older than Django itself accepts: the command has that error
    return server_version_messages(alias, version_num)


@register(Tags.database)
def check_pooling(
    app_configs: Sequence[AppConfig] | None = None, databases: Collection[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """A pooler in transaction mode in front of the jobs database, found by asking it (see
    ``runtime.pooler``), and what the settings must say then (W004 … W007). It opens two
    connections, so it runs where Django runs its database checks (``migrate``, ``check
    --database``) and at the start of ``runjobs`` and ``reapjobs`` (``management.pooling``),
    not on every start."""
    alias = user_settings().get("DATABASE", DEFAULTS["DATABASE"])
    listen = user_settings().get("LISTEN_DATABASE")
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    if listen is not None and listen not in settings.DATABASES:
        return []  # E052
    if connections[alias].vendor != "postgresql":
        return []  # E008
    import psycopg

    from django_jobs.runtime import pooler

    try:
        seen = pooler.survey()
    except psycopg.Error:
        return []  # unreachable: the command that asked has its own error to show
    return pooling_messages(seen)


def pooling_messages(seen: Survey) -> list[CheckMessage]:
    """The warnings about what ``seen`` found (``runjobs`` and ``reapjobs`` log them)."""
    return [
        *_undeclared_pool(seen),
        *_prepared_behind_pool(seen),
        *_listening_through_pool(seen),
        *_listening_elsewhere(seen),
    ]


def _undeclared_pool(seen: Survey) -> list[CheckMessage]:
    from django_jobs.runtime.pooler import Pooling

    database = connections[seen.alias].settings_dict
    if seen.pooling is not Pooling.TRANSACTIONS or database.get("DISABLE_SERVER_SIDE_CURSORS"):
        return []
    return [
        Warning(
            f"Database {seen.alias!r} goes through a connection pooler in transaction mode but "
            "does not set DISABLE_SERVER_SIDE_CURSORS: django_jobs would prepare its enqueue and "
            "claim statements there (missing on the next server connection, or another client's "
            "statement run instead) and set its workers' statement_timeout on sessions the pooler "
            "lends to other clients.",
            hint=f"Set DISABLE_SERVER_SIDE_CURSORS = True in DATABASES[{seen.alias!r}], as Django "
            "asks for transaction pooling (runjobs does it for itself when it finds the pooler); "
            "see docs/scaling.md#pgbouncer.",
            id="django_jobs.W004",
        )
    ]


def _prepared_behind_pool(seen: Survey) -> list[CheckMessage]:
    from django_jobs.runtime.pooler import Pooling

    threshold = (connections[seen.alias].settings_dict.get("OPTIONS") or {}).get("prepare_threshold")
    forced = user_settings().get("PREPARED_STATEMENTS")
    if seen.pooling is not Pooling.TRANSACTIONS or (threshold is None and forced is not True):
        return []
    return [
        Warning(
            f"Database {seen.alias!r} goes through a connection pooler in transaction mode but "
            f"prepares statements (OPTIONS['prepare_threshold'] is {threshold!r}, "
            f"DJANGO_JOBS['PREPARED_STATEMENTS'] is {forced!r}): a statement prepared on one "
            "server connection is missing on the next.",
            hint="Leave OPTIONS['prepare_threshold'] out (Django's None) and PREPARED_STATEMENTS "
            "at None, unless the pooler supports prepared statements (PgBouncer 1.21+ with "
            "max_prepared_statements).",
            id="django_jobs.W005",
        )
    ]


def _listening_through_pool(seen: Survey) -> list[CheckMessage]:
    """Found, or declared: the listener does not LISTEN on an alias declared pooled either."""
    from django_jobs.runtime.pooler import Pooling

    declared = bool(connections[seen.listen_alias].settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))
    pooled = declared or seen.listen_pooling is Pooling.TRANSACTIONS
    if not pooled or user_settings().get("NOTIFY", DEFAULTS["NOTIFY"]) is not True:
        return []
    return [
        Warning(
            f"Workers LISTEN on database {seen.listen_alias!r}, which goes through a connection "
            "pooler in transaction mode: it cannot hold a LISTEN, so they poll every "
            "POLL_INTERVAL instead of starting jobs within milliseconds.",
            hint="Set DJANGO_JOBS['LISTEN_DATABASE'] to an alias that connects to PostgreSQL "
            "directly (or through a session-mode pool), or NOTIFY = False to say that polling "
            "is meant.",
            id="django_jobs.W006",
        )
    ]


def _listening_elsewhere(seen: Survey) -> list[CheckMessage]:
    if seen.listen_same_database is not False:
        return []
    return [
        Warning(
            f"DJANGO_JOBS['LISTEN_DATABASE'] is {seen.listen_alias!r}, which reaches another "
            f"database than DATABASE ({seen.alias!r}): workers would hear none of its "
            "notifications, and poll.",
            hint="Point it at the same PostgreSQL database as DATABASE, directly.",
            id="django_jobs.W007",
        )
    ]


@register(Tags.compatibility)
def check_upcasters(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """A gap in a type's upcaster chain: jobs of the versions below it could never be read."""
    from django_jobs.registry import registry

    errors: list[CheckMessage] = []
    for job_type in sorted(registry.all(), key=lambda t: t.name):
        oldest = job_type.oldest_readable_version
        stranded = sorted(v for v in job_type.upcasters if v < oldest)
        beyond = sorted(v for v in job_type.upcasters if v >= job_type.version)
        if stranded:
            errors.append(
                Error(
                    f"Job type {job_type.name!r} (version {job_type.version}) has no upcaster from "
                    f"version {oldest - 1}, so its upcasters from version(s) "
                    f"{', '.join(map(str, stranded))} can never be reached.",
                    hint=f"Add upcasters[{oldest - 1}] (payload v{oldest - 1} → v{oldest}). Until "
                    f"then, workers leave jobs older than version {oldest} pending.",
                    obj=job_type.handler,
                    id="django_jobs.E009",
                )
            )
        if beyond:
            errors.append(
                Error(
                    f"Job type {job_type.name!r} is at version {job_type.version} but has upcasters "
                    f"from version(s) {', '.join(map(str, beyond))}.",
                    hint="An upcaster from version v turns a v payload into v + 1; raise the type's "
                    "version or remove the extra upcasters.",
                    obj=job_type.handler,
                    id="django_jobs.E010",
                )
            )
    return errors


@register(Tags.compatibility)
def check_effects_declared(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """A type that says nothing of where its effects are: after a restore its jobs are held until
    a person releases the hold, and then reconciled or parked, as if it called a provider. A
    Django task's type is not named: it has no way to say."""
    from django_jobs.registry import registry

    return [
        Warning(
            f"Job type {job_type.name!r} does not say whether its effects stay in the database: "
            "after a restore from a backup its jobs are held, then parked for review, as if it "
            "called a provider.",
            hint="Say it: @job(..., external=True) if it may act outside the database (a charge, "
            "a mail, a webhook), or external=False if every effect it has is a write to this "
            "database (see docs/writing-jobs.md).",
            obj=job_type.handler,
            id="django_jobs.W008",
        )
        for job_type in sorted(registry.all(), key=lambda t: t.name)
        if not job_type.says_where_effects_are and not job_type.task
    ]


@register(Tags.compatibility)
def check_schedules(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """``DJANGO_JOBS["SCHEDULES"]``: each entry computes (expression, interval, time zone, keys)
    and names a job type this project registers; no two schedules share a name."""
    from django_jobs.registry import registry
    from django_jobs.schedules import InvalidSchedule, from_entry

    entries = user_settings().get("SCHEDULES", {})
    if not isinstance(entries, dict):
        return [
            Error(
                "DJANGO_JOBS['SCHEDULES'] must be a dict of schedule name → entry.",
                hint='e.g. {"nightly-report": {"type": "reports.nightly", "cron": "0 3 * * *"}}',
                id="django_jobs.E016",
            )
        ]
    errors: list[CheckMessage] = []
    typed = {t.name for t in registry.all() if t.schedule is not None}
    for name, entry in sorted(entries.items(), key=lambda item: str(item[0])):
        if not isinstance(name, str) or not isinstance(entry, dict):
            errors.append(
                Error(
                    f"DJANGO_JOBS['SCHEDULES'][{name!r}] must be a dict keyed by a name.",
                    id="django_jobs.E016",
                )
            )
            continue
        try:
            schedule = from_entry(name, entry)
        except InvalidSchedule as exc:
            errors.append(
                Error(
                    f"DJANGO_JOBS['SCHEDULES']: {exc}.",
                    hint="A schedule needs 'type' and either 'cron' (five fields, e.g. '0 3 * * *') or "
                    "'every' (seconds >= 1), and a 'tz' from the IANA database.",
                    id="django_jobs.E017",
                )
            )
            continue
        if schedule.type not in registry:
            errors.append(
                Error(
                    f"DJANGO_JOBS['SCHEDULES'][{name!r}] names an unknown job type {schedule.type!r}.",
                    hint="Register it with @job in an installed app's jobs.py.",
                    id="django_jobs.E018",
                )
            )
        if name in typed:
            errors.append(
                Error(
                    f"DJANGO_JOBS['SCHEDULES'] reuses the name {name!r} of a job type declared with "
                    "@job(schedule=...): two schedules would share one tick record.",
                    id="django_jobs.E019",
                )
            )
    return errors


@register(Tags.compatibility)
def check_declared_queues(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """``DJANGO_JOBS["QUEUES"]``, when declared, is a list of queue names, and every queue the
    project names elsewhere — job types, ``DEFAULT_QUEUE``, schedules, the Tasks backends — is
    among them: enqueue() would refuse the jobs of any other at run time."""
    user = user_settings()
    declared = user.get("QUEUES", DEFAULTS["QUEUES"])
    if declared is None:
        return []
    if not _queue_names(declared):
        return [
            Error(
                f"DJANGO_JOBS['QUEUES'] is {declared!r}: give None or a non-empty list of queue names.",
                hint="e.g. ['default', 'emails']: letters, digits and _ . : -, at most 100 characters.",
                id="django_jobs.E070",
            )
        ]
    return [
        *_undeclared_job_queues(declared),
        *_undeclared_task_queues(declared),
        *_undeclared_setting_queues(user, declared),
    ]


def _queue_names(value: Any) -> bool:
    return (
        isinstance(value, list | tuple | set | frozenset)
        and bool(value)
        and all(isinstance(name, str) and QUEUE_RE.match(name) for name in value)
    )


def _undeclared_job_queues(declared: Collection[str]) -> list[CheckMessage]:
    from django_jobs.registry import registry

    return [
        Error(
            f"Job type {job_type.name!r}: {undeclared_queue(job_type.queue, declared)}",
            hint="Declare the queue in DJANGO_JOBS['QUEUES'], or fix the type's @job(queue=...).",
            obj=job_type.handler,
            id="django_jobs.E071",
        )
        for job_type in sorted(registry.all(), key=lambda t: t.name)
        # A type without a queue of its own runs in DEFAULT_QUEUE, which E073 checks once.
        if job_type.queue is not None and job_type.queue not in declared
    ]


def _undeclared_task_queues(declared: Collection[str]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for alias, params in sorted(_jobs_task_backends().items()):
        queues = params.get("QUEUES", ["default"])  # Django's default: the "default" queue only
        if not isinstance(queues, list | tuple | set | frozenset):
            continue  # the backend refuses it when it loads
        for queue in sorted(q for q in queues if isinstance(q, str) and q not in declared):
            errors.append(
                Error(
                    f"TASKS[{alias!r}]['QUEUES']: {undeclared_queue(queue, declared)}",
                    hint="Declare the queue in DJANGO_JOBS['QUEUES'], or take it out of the backend's.",
                    id="django_jobs.E072",
                )
            )
    return errors


def _jobs_task_backends() -> dict[str, dict[str, Any]]:
    """The entries of ``TASKS`` whose backend is (a subclass of) ``JobsBackend``."""
    from django.utils.module_loading import import_string

    backends = getattr(settings, "TASKS", {})
    found: dict[str, dict[str, Any]] = {}
    for alias, params in backends.items() if isinstance(backends, dict) else ():
        if not isinstance(params, dict):
            continue
        try:
            from django_jobs.tasks_framework.backend import JobsBackend

            backend = import_string(params.get("BACKEND", ""))
        except ImportError:  # no Tasks framework here, or a backend path Django reports itself
            continue
        if isinstance(backend, type) and issubclass(backend, JobsBackend):
            found[str(alias)] = params
    return found


def _undeclared_setting_queues(user: dict[str, Any], declared: Collection[str]) -> list[CheckMessage]:
    named = [("['DEFAULT_QUEUE']", user.get("DEFAULT_QUEUE", DEFAULTS["DEFAULT_QUEUE"]))]
    schedules = user.get("SCHEDULES", {})
    if isinstance(schedules, dict):
        named += [
            (f"['SCHEDULES'][{name!r}]['queue']", entry["queue"])
            for name, entry in sorted(schedules.items(), key=lambda item: str(item[0]))
            if isinstance(entry, dict) and isinstance(entry.get("queue"), str)
        ]
    return [
        Error(
            f"DJANGO_JOBS{where}: {undeclared_queue(queue, declared)}",
            hint="Declare the queue in DJANGO_JOBS['QUEUES'], or name a declared one.",
            id="django_jobs.E073",
        )
        for where, queue in named
        if isinstance(queue, str) and queue not in declared
    ]
