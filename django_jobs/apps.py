from __future__ import annotations

from django.apps import AppConfig


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Background jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from django_jobs import checks  # noqa: F401  # registers the system checks
        from django_jobs.runtime import connectivity

        # The worker's own threads bound their statements (connectivity.run_worker_statements).
        connectivity.install()

        # Handlers register themselves with @job when their module is imported; importing
        # every installed app's jobs.py means web processes and workers know the same types.
        # A task becomes a job type when its @task decorator runs: with Django's Tasks on
        # django_jobs, a worker must import every tasks.py to know (and claim) them too.
        for module_name in discovered_module_names():
            autodiscover_modules(module_name)


def discovered_module_names() -> tuple[str, ...]:
    """The modules every process imports from each installed app at start-up: ``jobs``, and
    ``tasks`` when Django's Tasks framework runs on django_jobs."""
    return ("jobs", "tasks") if _serves_tasks() else ("jobs",)


def discovered_modules() -> list[str]:
    """The dotted paths of the modules ``ready()`` imported: the job types a worker knows are
    the ones these modules (and what they import) register."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    return [
        f"{config.name}.{name}"
        for config in apps.get_app_configs()
        for name in discovered_module_names()
        if module_has_submodule(config.module, name)
    ]


def _serves_tasks() -> bool:
    """Whether Django's Tasks framework is configured to run on django_jobs."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None) or {}
    return any(
        isinstance(options, dict) and str(options.get("BACKEND", "")).startswith("django_jobs.")
        for options in backends.values()
    )
