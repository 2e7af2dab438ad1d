"""The migrations describe the models exactly: a project's `makemigrations --check` (a common CI
step) finds nothing to write for django_jobs, whose migrations ship in the package."""

from __future__ import annotations

from django.apps import apps
from django.db.migrations.autodetector import MigrationAutodetector
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState


def test_makemigrations_finds_no_change_in_django_jobs() -> None:
    # What makemigrations compares, without the database it reads only to check the history.
    loader = MigrationLoader(None, ignore_no_migrations=True)
    changes = MigrationAutodetector(loader.project_state(), ProjectState.from_apps(apps)).changes(
        graph=loader.graph, trim_to_apps={"django_jobs"}
    )
    described = [op.describe() for migration in changes.get("django_jobs", []) for op in migration.operations]
    assert described == []
