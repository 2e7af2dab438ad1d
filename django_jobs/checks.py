"""System checks. IDs are stable: django_jobs.E001 … and django_jobs.W001 …"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from django_jobs.conf import DEFAULTS

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
        value = user.get(key, DEFAULTS[key])
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(Error(f"DJANGO_JOBS[{key!r}] must be a number > 0.", id="django_jobs.E003"))
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
    return errors


@register(Tags.compatibility)
def check_database(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    alias = getattr(settings, "DJANGO_JOBS", {}).get("DATABASE", DEFAULTS["DATABASE"])
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
