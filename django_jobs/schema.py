"""Whether the jobs database has django_jobs' tables, checked before a command starts work.

A worker started before ``manage.py migrate`` would announce itself, then fail on every query
with a traceback; one look at the migration records beforehand turns that into one sentence.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from django.apps import apps
from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
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
        if all_recorded(connection, ["django_jobs"]):
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


def all_recorded(connection: BaseDatabaseWrapper, app_labels: Iterable[str] | None = None) -> bool:
    """Whether every migration file of the apps ``app_labels`` (default: every installed app)
    is recorded as applied in ``connection``'s database: one query, and no migration imported.
    False does not say that one is missing: it sends the caller to Django's full plan (which
    judges, say, a squashed migration whose replaced ones were applied)."""
    from django.db.migrations.loader import MigrationLoader

    labels = [config.label for config in apps.get_app_configs()] if app_labels is None else app_labels
    on_disk: set[tuple[str, str]] = set()
    for label in labels:
        package, _ = MigrationLoader.migrations_module(label)
        if package is None:
            continue
        try:
            module = importlib.import_module(package)
        except ModuleNotFoundError:
            continue  # an app without migrations, as Django's loader sees it
        # The files Django's MigrationLoader counts as migrations.
        names = pkgutil.iter_modules(getattr(module, "__path__", []))
        on_disk.update((label, name) for _, name, is_pkg in names if not is_pkg and name[0] not in "_~")
    with connection.cursor() as cursor:
        # As Django's MigrationRecorder asks, so that a default database of another vendor works.
        if "django_migrations" not in connection.introspection.table_names(cursor):
            return False
        cursor.execute("SELECT app, name FROM django_migrations")
        recorded = set(cursor.fetchall())
    return on_disk <= recorded


def records_may_lag(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether Django's unapplied-migrations warning may have something to say about database
    ``alias`` (``BaseCommand.check_migrations``, which reads every migration file): False only
    when its records show every file applied."""
    try:
        return not all_recorded(connections[alias])
    except DatabaseError:
        return True  # Django's check then meets the database that does not answer, as before


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
