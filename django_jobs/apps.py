from __future__ import annotations

from django.apps import AppConfig


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Background jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from django_jobs import (
            checks,  # noqa: F401  # registers the system checks
            connectivity,
        )

        # The worker's own threads bound their statements (connectivity.run_worker_statements).
        connectivity.install()

        # Handlers register themselves with @job when their module is imported; importing
        # every installed app's jobs.py means web processes and workers know the same types.
        autodiscover_modules("jobs")
        if _serves_tasks():
            # A task becomes a job type when its @task decorator runs: a worker must import
            # every tasks.py to know (and claim) the tasks the web processes enqueue.
            autodiscover_modules("tasks")


def _serves_tasks() -> bool:
    """Whether Django's Tasks framework is configured to run on django_jobs."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None) or {}
    return any(
        isinstance(options, dict) and str(options.get("BACKEND", "")).startswith("django_jobs.")
        for options in backends.values()
    )
