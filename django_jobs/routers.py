"""Send every query of django_jobs' models to the jobs database (``DJANGO_JOBS["DATABASE"]``).

django_jobs' own statements name the alias themselves; this router is what routes the rest:
the admin's querysets and forms, a project's own ``Job.objects`` reads, and ``migrate``, which
then creates the job tables on the jobs database alone::

    DATABASE_ROUTERS = ["django_jobs.routers.JobsRouter"]

It speaks only of django_jobs' models and says nothing (``None``) of any other app's, so it
composes with a project's own routers in either order. ``django_jobs.E050`` reports a project
whose routers send the models elsewhere.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model

from django_jobs.conf import jobs_settings

APP_LABEL = "django_jobs"


def _ours(model: type[Model] | Model) -> bool:
    return bool(model._meta.app_label == APP_LABEL)


class JobsRouter:
    """Reads, writes and migrations of django_jobs' models go to the jobs database."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return jobs_settings.DATABASE if _ours(model) else None

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return jobs_settings.DATABASE if _ours(model) else None

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        # Rows of the job tables relate among themselves; a foreign key from them to another
        # database could never be enforced, and none exists.
        if _ours(obj1) and _ours(obj2):
            return True
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if app_label == APP_LABEL:
            return db == jobs_settings.DATABASE
        return None
