"""The path Django's ``TASKS`` setting names: ``"BACKEND": "django_jobs.backend.JobsBackend"``.

The backend itself lives with the rest of the Tasks support, in :mod:`django_jobs.tasks_framework.backend`;
this module keeps the documented path working.
"""

from django_jobs.tasks_framework.backend import JobsBackend

__all__ = ["JobsBackend"]
