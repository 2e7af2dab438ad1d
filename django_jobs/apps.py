from __future__ import annotations

from django.apps import AppConfig


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Background jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from django_jobs import checks  # noqa: F401  # registers the system checks

        # Handlers register themselves with @job when their module is imported; importing
        # every installed app's jobs.py means web processes and workers know the same types.
        autodiscover_modules("jobs")
