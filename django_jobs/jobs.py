"""The job types django_jobs runs for itself, imported by every process at start-up as any
app's ``jobs`` module is: ``django_jobs.bulk`` carries out an operator's action on every job a
filter matches (:mod:`django_jobs.console.bulk_runner`)."""

from django_jobs.console import bulk_runner  # noqa: F401  # registers django_jobs.bulk
