"""Whether the jobs database has django_jobs' tables, checked before a command starts work.

A worker started before ``manage.py migrate`` would announce itself, then fail on every query
with a traceback; one look at the migration records beforehand turns that into one sentence.
"""

from __future__ import annotations

import importlib
import pkgutil

from django.conf import settings
from django.core.management.base import CommandError
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_jobs.conf import jobs_settings

#: The exit status of a command refused for an unmigrated database (as for a usage error: the
#: command cannot run as set up, and retrying it unchanged will not help).
NOT_MIGRATED_STATUS = 2
#: The most unapplied migrations named in the message.
MAX_NAMED = 3


def unapplied_migrations(alias: str) -> list[str] | None:
    """The migrations django_jobs needs that database ``alias`` has not applied, in the order
    ``migrate`` would apply them; None when the database cannot be asked (unreachable: the
    command's own handling of an outage takes over)."""
    connection = connections[alias]
    opened_here = connection.connection is None
    try:
        if _all_recorded(connection):
            return []
        # Imported here: loading every app's migrations costs a worker ~1 MB it would keep for
        # its life, and is only needed to name what is missing.
        from django.db.migrations.executor import MigrationExecutor

        executor = MigrationExecutor(connection)
        targets = executor.loader.graph.leaf_nodes("django_jobs")
        plan = executor.migration_plan(targets)
    except DatabaseError:
        return None
    finally:
        # A worker may fork its execution slots: none may inherit a connection opened for this
        # look. One the caller already had (a transaction in progress) is the caller's.
        if opened_here:
            connection.close()
    return [f"{migration.app_label}.{migration.name}" for migration, backwards in plan if not backwards]


def _all_recorded(connection: BaseDatabaseWrapper) -> bool:
    """Whether every migration file of django_jobs is recorded as applied: one query, without
    importing a migration. False sends the caller to the full plan (a squashed migration, say,
    whose replaced ones were applied, is judged there)."""
    package = settings.MIGRATION_MODULES.get("django_jobs", "django_jobs.migrations")
    if package is None:
        return False
    names = {
        name
        for _, name, is_pkg in pkgutil.iter_modules(importlib.import_module(package).__path__)
        if not is_pkg and name[0] not in "_~"  # what Django's MigrationLoader counts
    }
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('django_migrations') IS NOT NULL")
        if not cursor.fetchone()[0]:
            return False
        cursor.execute("SELECT name FROM django_migrations WHERE app = 'django_jobs'")
        recorded = {name for (name,) in cursor.fetchall()}
    return names <= recorded


def require_migrated(alias: str | None = None) -> None:
    """Raise ``CommandError`` (exit status 2) unless the jobs database is migrated."""
    alias = alias or jobs_settings.DATABASE
    missing = unapplied_migrations(alias)
    if not missing:
        return
    named = ", ".join(missing[:MAX_NAMED]) + (
        f" and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED else ""
    )
    raise CommandError(
        f"database {alias!r} lacks django_jobs' tables or their latest changes "
        f"({len(missing)} unapplied migration(s): {named}): run manage.py migrate"
        + (f" --database {alias}" if alias != "default" else ""),
        returncode=NOT_MIGRATED_STATUS,
    )
