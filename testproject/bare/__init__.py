"""The app of a project that uses the Tasks framework with ``JobsBackend`` but forgot
``"django_jobs"`` in INSTALLED_APPS (settings with DJANGO_JOBS_NOT_INSTALLED)."""
