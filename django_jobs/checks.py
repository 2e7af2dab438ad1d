"""System checks. IDs are stable: django_jobs.E001 … and django_jobs.W001 …"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router

from django_jobs.conf import DEFAULTS
from django_jobs.errors import undeclared_queue
from django_jobs.registry import QUEUE_RE

_POSITIVE_NUMBERS = (
    "POLL_INTERVAL",
    "PREFETCH_SECONDS",
    "OUTCOME_FLUSH_INTERVAL",
    "HEARTBEAT_INTERVAL",
    "LEASE_TIMEOUT",
    "PROGRESS_INTERVAL",
    "REAPER_INTERVAL",
    "BACKOFF_BASE",
    "BACKOFF_CAP",
)
_POSITIVE_INTEGERS = (
    "BATCH_SIZE",
    "MAX_PAYLOAD_BYTES",
    "MAX_CHECKPOINT_BYTES",
    "MAX_RESULT_BYTES",
    "DEFAULT_MAX_ATTEMPTS",
    "MAX_ERROR_CHARS",
    "METRICS_MAX_LABEL_VALUES",
)


@register(Tags.compatibility)
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(settings, "DJANGO_JOBS", {})
    if not isinstance(user, dict):
        return [Error("DJANGO_JOBS must be a dict.", id="django_jobs.E001")]
    errors: list[CheckMessage] = []
    for key in sorted(set(user) - set(DEFAULTS)):
        errors.append(
            Error(
                f"DJANGO_JOBS has an unknown key {key!r}.",
                hint="Known keys: " + ", ".join(sorted(DEFAULTS)),
                id="django_jobs.E002",
            )
        )
    for key in _POSITIVE_NUMBERS:
        if not _positive_number(user.get(key, DEFAULTS[key])):
            errors.append(
                Error(f"DJANGO_JOBS[{key!r}] must be a finite number > 0 (seconds).", id="django_jobs.E003")
            )
    for key in _POSITIVE_INTEGERS:
        value = user.get(key, DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            errors.append(Error(f"DJANGO_JOBS[{key!r}] must be an integer > 0.", id="django_jobs.E004"))
    jitter = user.get("BACKOFF_JITTER", DEFAULTS["BACKOFF_JITTER"])
    if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
        errors.append(Error("DJANGO_JOBS['BACKOFF_JITTER'] must be between 0 and 1.", id="django_jobs.E005"))
    lease = user.get("LEASE_TIMEOUT", DEFAULTS["LEASE_TIMEOUT"])
    beat = user.get("HEARTBEAT_INTERVAL", DEFAULTS["HEARTBEAT_INTERVAL"])
    if isinstance(lease, int | float) and isinstance(beat, int | float) and beat >= lease:
        errors.append(
            Error(
                "DJANGO_JOBS['HEARTBEAT_INTERVAL'] must be shorter than LEASE_TIMEOUT, "
                "or every running job would look stale between two beats.",
                id="django_jobs.E006",
            )
        )
    errors.extend(_check_health_thresholds(user))
    errors.extend(_check_patterns(user.get("SENSITIVE_PAYLOAD_KEYS", DEFAULTS["SENSITIVE_PAYLOAD_KEYS"])))
    errors.extend(_check_retention(user.get("RETENTION", DEFAULTS["RETENTION"])))
    if not isinstance(user.get("NOTIFY", DEFAULTS["NOTIFY"]), bool):
        errors.append(Error("DJANGO_JOBS['NOTIFY'] must be True or False.", id="django_jobs.E015"))
    queue = user.get("DEFAULT_QUEUE", DEFAULTS["DEFAULT_QUEUE"])
    if not isinstance(queue, str) or not QUEUE_RE.match(queue):
        errors.append(
            Error(
                f"DJANGO_JOBS['DEFAULT_QUEUE'] is {queue!r}, not a queue name.",
                hint="Letters, digits and _ . : -, at most 100 characters.",
                id="django_jobs.E014",
            )
        )
    errors.extend(_check_health(user))
    errors.extend(_check_connection_options(user))
    return errors


#: Connection options that None turns off (django_jobs/runtime/connectivity.py).
_CONNECTION_DURATIONS = (
    "CONNECT_TIMEOUT",
    "TCP_KEEPALIVES_IDLE",
    "TCP_KEEPALIVES_INTERVAL",
    "TCP_USER_TIMEOUT",
    "STATEMENT_TIMEOUT",
)


def _check_connection_options(user: dict[str, Any]) -> list[CheckMessage]:
    """The options that bound how long a worker waits on a dead or stuck connection."""
    errors: list[CheckMessage] = []
    for key in _CONNECTION_DURATIONS:
        value = user.get(key, DEFAULTS[key])
        if value is not None and not _positive_number(value):
            errors.append(
                Error(
                    f"DJANGO_JOBS[{key!r}] must be None (the libpq and kernel default) or a finite "
                    "number > 0 (seconds).",
                    id="django_jobs.E020",
                )
            )
    count = user.get("TCP_KEEPALIVES_COUNT", DEFAULTS["TCP_KEEPALIVES_COUNT"])
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count <= 0):
        errors.append(
            Error(
                "DJANGO_JOBS['TCP_KEEPALIVES_COUNT'] must be None or an integer > 0.", id="django_jobs.E021"
            )
        )
    return errors


_LIVENESS_LIMITS = ("LIVENESS_STALL_LIMIT", "LIVENESS_OUTAGE_LIMIT", "LIVENESS_STUCK_LIMIT")
#: A shorter bearer token is guessable: the metrics view would be open to anyone who tries.
MIN_TOKEN_CHARS = 16


def _check_health(user: dict[str, Any]) -> list[CheckMessage]:
    """The metrics token and the liveness limits (read long after start-up, by probes)."""
    errors: list[CheckMessage] = []
    token = user.get("METRICS_TOKEN", DEFAULTS["METRICS_TOKEN"])
    if token is not None and (not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_CHARS):
        errors.append(
            Error(
                f"DJANGO_JOBS['METRICS_TOKEN'] must be None or a string of at least {MIN_TOKEN_CHARS} "
                "characters.",
                hint="Generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))'",
                id="django_jobs.E030",
            )
        )
    for key in _LIVENESS_LIMITS:
        value = user.get(key, DEFAULTS[key])
        if value is not None and not _positive_number(value):
            errors.append(
                Error(
                    f"DJANGO_JOBS[{key!r}] must be None (derived from the intervals) or a finite "
                    "number > 0 (seconds).",
                    id="django_jobs.E031",
                )
            )
    return errors


def _positive_number(value: Any) -> bool:
    """A real, finite number above zero (True is an int to Python, not a duration)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


_HEALTH_THRESHOLDS = ("CHECK_OLDEST_DUE_WARNING", "CHECK_OLDEST_DUE_CRITICAL", "CHECK_STALE_REAPER_INTERVALS")


def _check_health_thresholds(user: dict[str, Any]) -> list[CheckMessage]:
    """The thresholds of ``checkjobs`` and the health check: read only when an alert is due,
    so a typo must fail at start-up, not in the middle of an incident."""
    values = {key: user.get(key, DEFAULTS[key]) for key in _HEALTH_THRESHOLDS}
    errors: list[CheckMessage] = [
        Error(f"DJANGO_JOBS[{key!r}] must be a finite number > 0 (seconds).", id="django_jobs.E040")
        for key, value in values.items()
        if not _positive_number(value)
    ]
    warning, critical = values["CHECK_OLDEST_DUE_WARNING"], values["CHECK_OLDEST_DUE_CRITICAL"]
    if not errors and warning >= critical:
        errors.append(
            Error(
                f"DJANGO_JOBS['CHECK_OLDEST_DUE_WARNING'] ({warning!r}) must be shorter than "
                f"CHECK_OLDEST_DUE_CRITICAL ({critical!r}), or a backlog would turn critical "
                "without a warning first.",
                id="django_jobs.E041",
            )
        )
    return errors


def _check_retention(retention: Any) -> list[CheckMessage]:
    """Retention is read by the reaper, long after start-up: a typo must fail here, not there."""
    if not isinstance(retention, dict):
        return [Error("DJANGO_JOBS['RETENTION'] must be a dict of status → seconds.", id="django_jobs.E012")]
    errors: list[CheckMessage] = []
    for status, keep in retention.items():
        if status not in DEFAULTS["RETENTION"]:
            errors.append(
                Error(
                    f"DJANGO_JOBS['RETENTION'] has an unknown status {status!r}.",
                    hint="Finished statuses that can be pruned: " + ", ".join(sorted(DEFAULTS["RETENTION"])),
                    id="django_jobs.E012",
                )
            )
        elif keep is not None and not _positive_number(keep):
            errors.append(
                Error(
                    f"DJANGO_JOBS['RETENTION'][{status!r}] is {keep!r}: give seconds (a number > 0), "
                    "or None to keep these jobs forever.",
                    id="django_jobs.E013",
                )
            )
    return errors


def _check_patterns(patterns: Any) -> list[CheckMessage]:
    if isinstance(patterns, str) or not isinstance(patterns, list | tuple):
        return [
            Error(
                "DJANGO_JOBS['SENSITIVE_PAYLOAD_KEYS'] must be a list of regular expressions.",
                id="django_jobs.E011",
            )
        ]
    errors: list[CheckMessage] = []
    for pattern in patterns:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            errors.append(
                Error(
                    f"DJANGO_JOBS['SENSITIVE_PAYLOAD_KEYS'] holds {pattern!r}, which is not a "
                    f"regular expression: {exc}",
                    id="django_jobs.E011",
                )
            )
    return errors


@register(Tags.compatibility)
def check_database(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(settings, "DJANGO_JOBS", {})
    # A DJANGO_JOBS that is not a dict is E001: the default database is checked meanwhile.
    alias = user.get("DATABASE", DEFAULTS["DATABASE"]) if isinstance(user, dict) else DEFAULTS["DATABASE"]
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
def check_schedules(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """``DJANGO_JOBS["SCHEDULES"]``: each entry computes (expression, interval, time zone, keys)
    and names a job type this project registers; no two schedules share a name."""
    from django_jobs.registry import registry
    from django_jobs.schedules import InvalidSchedule, from_entry

    user = getattr(settings, "DJANGO_JOBS", {})
    entries = user.get("SCHEDULES", {}) if isinstance(user, dict) else {}
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
    user = getattr(settings, "DJANGO_JOBS", {})
    declared = user.get("QUEUES", DEFAULTS["QUEUES"]) if isinstance(user, dict) else None
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
