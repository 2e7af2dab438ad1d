"""The two spellings of Django's Tasks framework, seen as one.

Django ≥ 6.0 ships ``django.tasks``; on Django 5.2 the same API comes from the ``django-tasks``
backport (``django_tasks``, ≥ 0.12). Each available one is a :class:`Family` here, Django's own
first. ``JobsBackend`` serves both from one codebase: it accepts either family's ``Task``,
answers with the ``TaskResult`` of the task's own family, sends the signals of every family
present, and raises exceptions that both families' ``except`` clauses catch.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.dispatch import Signal

from django_jobs.errors import EnqueueError

if TYPE_CHECKING:  # the runtime imports the models: the backend's module must not (check E060)
    from django_jobs.runtime.context import JobContext


@dataclass(frozen=True)
class Family:
    """One importable spelling of the Tasks framework."""

    module: str  # "django.tasks" or "django_tasks"
    Task: type[Any]
    TaskResult: type[Any]
    TaskResultStatus: Any
    TaskError: type[Any]
    #: The family's ``TaskContext`` with one more field, ``job``: our ``JobContext``.
    TaskContext: type[Any]
    BaseTaskBackend: type[Any]
    InvalidTask: type[Exception]
    TaskResultDoesNotExist: type[Exception]
    normalize_json: Callable[[Any], Any]
    task_enqueued: Signal
    task_started: Signal
    task_finished: Signal


def _family(module: str, base_path: str, invalid: str, normalize_path: str) -> Family | None:
    try:
        api = importlib.import_module(module)
    except ImportError:
        return None
    exceptions = importlib.import_module(f"{module}.exceptions")
    signals = importlib.import_module(f"{module}.signals")
    normalize_module, _, normalize_name = normalize_path.rpartition(".")
    return Family(
        module=module,
        Task=api.Task if hasattr(api, "Task") else importlib.import_module(f"{module}.base").Task,
        TaskResult=api.TaskResult,
        TaskResultStatus=api.TaskResultStatus,
        TaskError=importlib.import_module(f"{module}.base").TaskError,
        TaskContext=_with_job(api.TaskContext),
        BaseTaskBackend=importlib.import_module(base_path).BaseTaskBackend,
        InvalidTask=getattr(exceptions, invalid),
        TaskResultDoesNotExist=exceptions.TaskResultDoesNotExist,
        normalize_json=getattr(importlib.import_module(normalize_module), normalize_name),
        task_enqueued=signals.task_enqueued,
        task_started=signals.task_started,
        task_finished=signals.task_finished,
    )


def _with_job(context_class: type[Any]) -> type[Any]:
    """``TaskContext`` plus ``job``, so a ``takes_context`` task reaches heartbeat, effects,
    idempotency keys and its deadline: ``context.job.idempotency_key("charge")``."""

    @dataclass(frozen=True, slots=True, kw_only=True)
    class JobsTaskContext(context_class):  # type: ignore[misc]
        job: JobContext

    JobsTaskContext.__module__ = __name__
    return JobsTaskContext


FAMILIES: tuple[Family, ...] = tuple(
    family
    for family in (
        _family(
            "django.tasks", "django.tasks.backends.base", "InvalidTask", "django.utils.json.normalize_json"
        ),
        _family(
            "django_tasks",
            "django_tasks.backends.base",
            "InvalidTaskError",
            "django_tasks.utils.normalize_json",
        ),
    )
    if family is not None
)
if not FAMILIES:
    raise ImproperlyConfigured(
        "django_jobs.backend needs Django's Tasks framework: Django >= 6.0, or the django-tasks "
        "backport (pip install 'django-tasks>=0.12') on Django 5.2"
    )
#: The family whose classes ``JobsBackend`` derives from: Django's own when it has one.
PRIMARY = FAMILIES[0]


def family_of(task: object) -> Family:
    """The family ``task`` belongs to (the primary one for a look-alike)."""
    for family in FAMILIES:
        if isinstance(task, family.Task):
            return family
    return PRIMARY


# Raised by JobsBackend; `except` clauses written for either family catch them, and so do
# ours (EnqueueError, ValueError): a project mid-way between the two spellings loses nothing.
class InvalidTask(EnqueueError, *(f.InvalidTask for f in FAMILIES)):  # type: ignore[misc]
    """The task, its options or its arguments cannot be enqueued; nothing was written."""


class ArgumentsNotJSON(InvalidTask, TypeError):
    """A task's arguments are not JSON; nothing was written. Also a ``TypeError``, as the
    framework's own backends raise for such arguments."""


class TaskResultDoesNotExist(*(f.TaskResultDoesNotExist for f in FAMILIES)):  # type: ignore[misc]
    """No task result has that id."""


def status(family: Family, name: str) -> Any:
    """The family's ``TaskResultStatus`` member called ``name`` (READY, RUNNING, …)."""
    return family.TaskResultStatus[name]


def set_return_value(task_result: Any, value: Any) -> None:
    # TaskResult is frozen and keeps its value in a private field, as Django's backends fill it.
    object.__setattr__(task_result, "_return_value", value)


def replace(task_result: Any, **changes: Any) -> Any:
    """A copy of a frozen ``TaskResult`` with ``changes``, keeping its return value."""
    copy = dataclasses.replace(task_result, **changes)
    set_return_value(copy, task_result._return_value)
    return copy
