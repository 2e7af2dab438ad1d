"""The project's one task."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def welcome(user_id: int) -> None:
    """Never runs: the project has no worker."""
