"""The framework's own Tasks test suites, vendored with their licences and retargeted at
``JobsBackend`` (see ``backends.py``). Each runs where its framework is installed: Django's own
``tests/tasks`` on Django ≥ 6.0, the ``django-tasks`` backport's on Django 5.2, and
django-tasks-db's database-backend tests (``tasks_db``) on either."""

from __future__ import annotations

import importlib.util

collect_ignore: list[str] = []
if importlib.util.find_spec("django.tasks") is None:
    collect_ignore.append("django_own")
if importlib.util.find_spec("django.tasks") is not None or importlib.util.find_spec("django_tasks") is None:
    collect_ignore.append("backport")
