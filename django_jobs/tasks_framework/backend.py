"""``JobsBackend``: Django's Tasks framework on django_jobs.

::

    TASKS = {"default": {"BACKEND": "django_jobs.backend.JobsBackend"}}

``@task`` functions (``django.tasks`` on Django ≥ 6.0, the ``django_tasks`` backport on 5.2)
are then enqueued as job rows in the caller's transaction and run by ``manage.py runjobs`` with
every guarantee of a ``@job``. ``OPTIONS`` give the policy of the backend's tasks (read and
checked in ``tasks_framework.options``):

``MAX_ATTEMPTS`` (``DJANGO_JOBS["DEFAULT_MAX_ATTEMPTS"]``)
    Executions a task gets before it ends ``FAILED``; retryable errors (any exception but
    ``PermanentError``, ``SkipJob`` and ``JobCancelled``) are retried until then.
``BACKOFF_BASE``, ``BACKOFF_CAP``, ``BACKOFF_JITTER`` (the ``DJANGO_JOBS`` ones)
    The retry delay: ``base × 2^(attempt-1)``, capped, minus up to ``jitter`` of it.
``TIMEOUT`` (None)
    Seconds an execution may run before it is treated as timed out (and retried).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import uuid
from types import ModuleType
from typing import Any

from django.apps import apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_jobs.backoff import Backoff
from django_jobs.errors import EnqueueError
from django_jobs.jsonvalues import plain_json_problem
from django_jobs.tasks_framework import api as taskapi
from django_jobs.tasks_framework.api import ArgumentsNotJSON, InvalidTask, TaskResultDoesNotExist
from django_jobs.tasks_framework.options import OPTIONS_HINT, read_options

# Nothing imported here may import the models (django_jobs.models): Django imports this module
# for the TASKS setting, whether or not django_jobs is in INSTALLED_APPS, and a model of an app
# that is not installed raises RuntimeError before check() can say what is wrong (E060). The
# enqueue and the runner (tasks_framework.run) are imported where they are used.

_INSTALL_HINT = "Add 'django_jobs' to INSTALLED_APPS and run `manage.py migrate`."

#: Every family's InvalidTask: the base class raises its own family's.
_INVALID_TASK: tuple[type[Exception], ...] = tuple(f.InvalidTask for f in taskapi.FAMILIES)


class JobsBackend(taskapi.PRIMARY.BaseTaskBackend):  # type: ignore[name-defined,misc]
    """A production backend for Django's Tasks framework: leases, retries, results, the console."""

    task_class = taskapi.PRIMARY.Task
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # A bad entry must not raise here (see tasks_framework.options): what is wrong is kept,
        # reported by check() and raised by enqueue().
        policy = read_options(alias, self.queues, self.options)
        self.problems: list[str] = policy.problems
        self.max_attempts: int = policy.max_attempts
        self.backoff: Backoff = policy.backoff
        self.timeout: float | None = policy.timeout
        self.expires_in: float | None = policy.expires_in

    def _refuse_if_misconfigured(self) -> None:
        if not _jobs_installed():
            raise ImproperlyConfigured(f"{self._not_installed()}; nothing was enqueued. {_INSTALL_HINT}")
        if self.problems:
            raise ImproperlyConfigured("; ".join(self.problems) + "; nothing was enqueued")

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """The framework's checks of this backend; ``django_jobs.E060``: the app is not in
        ``INSTALLED_APPS``, so there are no job tables to enqueue into and no ``runjobs``; one
        ``django_jobs.E061`` per problem of its ``TASKS`` entry: ``manage.py check`` (and every
        command that runs the checks, such as ``runjobs``) shows them all instead of a
        traceback."""
        messages = list(super().check(**kwargs))
        if not apps.is_installed("django_jobs"):
            messages.append(checks.Error(self._not_installed(), hint=_INSTALL_HINT, id="django_jobs.E060"))
        messages.extend(
            checks.Error(problem, hint=OPTIONS_HINT, id="django_jobs.E061") for problem in self.problems
        )
        return messages

    def _not_installed(self) -> str:
        return f"TASKS[{self.alias!r}] uses {type(self).__name__}, but django_jobs is not in INSTALLED_APPS"

    # ---- validation --------------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Check ``task`` (either family's ``Task``) and register it as a job type.

        ``run_after`` may be an aware datetime or a ``timedelta`` (counted from the database's
        clock at enqueue). Raises ``InvalidTask``, which both families' ``InvalidTask`` catch.
        """
        run_after = task.run_after
        if isinstance(run_after, dt.timedelta):
            seconds = run_after.total_seconds()
            if not (math.isfinite(seconds) and seconds >= 0):
                raise InvalidTask(f"run_after must be a timedelta >= 0, not {run_after!r}")
        elif run_after is not None and not isinstance(run_after, dt.datetime):
            raise InvalidTask(f"run_after must be a datetime or a timedelta, not {type(run_after).__name__}")
        try:
            # The base class knows datetimes only; a timedelta is checked above.
            super().validate_task(_WithoutDelay(task) if isinstance(run_after, dt.timedelta) else task)
        except _INVALID_TASK as exc:
            if isinstance(exc, InvalidTask):
                raise
            raise InvalidTask(str(exc)) from exc
        if not _jobs_installed():
            return  # no job tables, no worker: nothing to register with (check() says E060)
        _taskrun().register(
            task, alias=self.alias, sender=type(self), max_attempts=self.max_attempts,
            backoff=self.backoff, timeout=self.timeout,
        )  # fmt: skip

    # ---- enqueue -----------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Write the task's job row on the caller's connection and return its ``TaskResult``.

        Inside ``transaction.atomic()`` the job commits or rolls back with the caller's writes.
        Raises ``InvalidTask`` (arguments that are not JSON, an invalid queue, a naive
        ``run_after``…) before anything is written.
        Raises ``ImproperlyConfigured`` while the backend's ``TASKS`` entry is invalid.
        """
        self._refuse_if_misconfigured()
        self.validate_task(task)
        family = taskapi.family_of(task)
        payload = {"args": _json(family, list(args), "args"), "kwargs": _json(family, dict(kwargs), "kwargs")}
        run_after = task.run_after
        from django_jobs.enqueueing import enqueue

        try:
            job = enqueue(
                task.module_path,
                payload,
                queue=task.queue_name,
                priority=task.priority,
                run_at=run_after if isinstance(run_after, dt.datetime) else None,
                delay=run_after if isinstance(run_after, dt.timedelta) else None,
                max_attempts=self.max_attempts,
                expires_in=self.expires_in,
            )
        except EnqueueError as exc:
            if isinstance(exc, InvalidTask):
                raise
            raise InvalidTask(str(exc)) from exc
        result = family.TaskResult(
            task=task,
            # A job recorded by django_jobs.testing.enqueued_jobs() and never written has no
            # id: its result gets one no job has, which get_result() does not find.
            id=str(job.id) if job.id is not None else f"unsaved-{uuid.uuid4().hex}",
            status=taskapi.status(family, "READY"),
            enqueued_at=job.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        _taskrun().send("task_enqueued", type(self), result)
        return result

    # ---- results -----------------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of the task with id ``result_id``, read now.

        Raises ``TaskResultDoesNotExist`` (both families catch it) for an id no task has.
        """
        if not _jobs_installed():
            raise ImproperlyConfigured(f"{self._not_installed()}: there are no results. {_INSTALL_HINT}")
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(f"no task result has id {result_id!r}") from None
        taskrun = _taskrun()
        job = taskrun.read_job(job_id)  # the row and its history: one query
        if job is None:
            raise TaskResultDoesNotExist(f"no task result has id {result_id!r}")
        task = _task_at(job.type)
        if task is None:
            raise TaskResultDoesNotExist(f"job {job_id} is not a task of Django's Tasks framework")
        task = _as_enqueued(task, priority=job.priority, queue_name=job.queue, backend=self.alias)
        return taskrun.result_of(taskapi.family_of(task), task, job, self.alias)


def _taskrun() -> ModuleType:
    """``tasks_framework.run``, imported on first use: it imports the models (see above)."""
    from django_jobs.tasks_framework import run

    return run


def _jobs_installed() -> bool:
    """Whether django_jobs is in INSTALLED_APPS; True while the app registry cannot tell yet
    (a task declared as the apps are being loaded: as before, it is registered)."""
    return not apps.apps_ready or apps.is_installed("django_jobs")


class _WithoutDelay:
    """``task`` as the base class's checks should see it: without a timedelta ``run_after``."""

    run_after = None

    def __init__(self, task: Any) -> None:
        self._task = task

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)


def _json(family: taskapi.Family, value: Any, what: str) -> Any:
    """Task arguments as the framework stores them (tuples as lists), checked to be plain JSON."""
    try:
        value = family.normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise ArgumentsNotJSON(f"task {what} must be JSON: {exc}; nothing was enqueued") from exc
    problem = plain_json_problem(value, f"task {what}")
    if problem is not None:
        raise ArgumentsNotJSON(f"{problem}; nothing was enqueued")
    return value


def _task_at(path: str) -> Any:
    """The task whose module path is ``path``, or None when there is none (a ``@job`` type)."""
    try:
        task = import_string(path)
    except ImportError:
        return None
    return task if isinstance(task, tuple(f.Task for f in taskapi.FAMILIES)) else None


def _as_enqueued(task: Any, **stored: Any) -> Any:
    """``task`` with the options its job was enqueued with (``.using()`` may have changed them)."""
    changes = {name: value for name, value in stored.items() if getattr(task, name) != value}
    if not changes:
        return task
    try:
        return dataclasses.replace(task, **changes)
    except (*_INVALID_TASK, ValueError):  # type: ignore[misc]  # a tuple of exception classes
        return task  # e.g. a queue no longer in QUEUES: the declared task still names the function


__all__ = ["JobsBackend"]
