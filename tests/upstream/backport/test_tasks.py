# ruff: noqa  # vendored from django-tasks 0.12.0 (tests/), BSD licence: see LICENSE.
# Retargeted at django_jobs' JobsBackend; every change is marked "Adapted (django_jobs)".
import dataclasses

from asgiref.sync import sync_to_async
from datetime import datetime

from django.test import TransactionTestCase, override_settings
from django.utils import timezone
from django.utils.module_loading import import_string

from django_tasks import (
    DEFAULT_TASK_QUEUE_NAME,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
)

# Adapted (django_jobs): the reference backends are replaced by JobsBackend.
from django_jobs.tasks_framework.backend import JobsBackend as DummyBackend
from django_jobs.models import Job
from tests.upstream.backends import IMMEDIATE_OPTIONS, ImmediateJobsBackend as ImmediateBackend
from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task
from django_tasks.exceptions import (
    InvalidTaskBackendError,
    InvalidTaskError,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)

# Adapted (django_jobs): the module is tests.upstream.backport.tasks here.
from . import tasks as test_tasks


@override_settings(
    TASKS={
        "default": {
            # Adapted (django_jobs): JobsBackend for the reference backends.
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default", "queue_1"],
        },
        "immediate": {
            "BACKEND": "tests.upstream.backends.ImmediateJobsBackend",
            "QUEUES": [],
            "OPTIONS": IMMEDIATE_OPTIONS,
        },
        "missing": {"BACKEND": "does.not.exist"},
    }
)
# Adapted (django_jobs): JobsBackend stores tasks in the database, emptied after each test.
class TaskTestCase(TransactionTestCase):
    def test_using_correct_backend(self) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], DummyBackend)

    def test_task_decorator(self) -> None:
        self.assertIsInstance(test_tasks.noop_task, Task)
        self.assertIsInstance(test_tasks.noop_task_async, Task)
        self.assertIsInstance(test_tasks.noop_task_from_bare_decorator, Task)

    def test_enqueue_task(self) -> None:
        result = test_tasks.noop_task.enqueue()

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(result.task, test_tasks.noop_task)
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})

        # Adapted (django_jobs): the reference backend's own store is its `results` list.
        self.assertEqual(list(Job.objects.values_list("id", flat=True)), [int(result.id)])

    async def test_enqueue_task_async(self) -> None:
        result = await test_tasks.noop_task.aenqueue()

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(result.task, test_tasks.noop_task)
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})

        # Adapted (django_jobs): the reference backend's own store is its `results` list.
        ids = [job_id async for job_id in Job.objects.values_list("id", flat=True)]
        self.assertEqual(ids, [int(result.id)])

    def test_enqueue_with_invalid_argument(self) -> None:
        with self.assertRaisesMessage(TypeError, "Unsupported type: <class 'datetime.datetime'>"):
            test_tasks.noop_task.enqueue(datetime.now())

    async def test_aenqueue_with_invalid_argument(self) -> None:
        with self.assertRaisesMessage(TypeError, "Unsupported type: <class 'datetime.datetime'>"):
            await test_tasks.noop_task.aenqueue(datetime.now())

    def test_using_priority(self) -> None:
        self.assertEqual(test_tasks.noop_task.priority, 0)
        self.assertEqual(test_tasks.noop_task.using(priority=1).priority, 1)
        self.assertEqual(test_tasks.noop_task.priority, 0)

    def test_using_queue_name(self) -> None:
        self.assertEqual(test_tasks.noop_task.queue_name, DEFAULT_TASK_QUEUE_NAME)
        self.assertEqual(test_tasks.noop_task.using(queue_name="queue_1").queue_name, "queue_1")
        self.assertEqual(test_tasks.noop_task.queue_name, DEFAULT_TASK_QUEUE_NAME)

    def test_using_run_after(self) -> None:
        now = timezone.now()

        self.assertIsNone(test_tasks.noop_task.run_after)
        self.assertEqual(test_tasks.noop_task.using(run_after=now).run_after, now)
        self.assertIsNone(test_tasks.noop_task.run_after)

    def test_using_unknown_backend(self) -> None:
        self.assertEqual(test_tasks.noop_task.backend, "default")

        with self.assertRaisesMessage(InvalidTaskBackendError, "The connection 'unknown' doesn't exist."):
            test_tasks.noop_task.using(backend="unknown")

    def test_using_missing_backend(self) -> None:
        self.assertEqual(test_tasks.noop_task.backend, "default")

        with self.assertRaisesMessage(
            InvalidTaskBackendError,
            "Could not find backend 'does.not.exist': No module named 'does'",
        ):
            test_tasks.noop_task.using(backend="missing")

    def test_using_creates_new_instance(self) -> None:
        new_task = test_tasks.noop_task.using()

        self.assertEqual(new_task, test_tasks.noop_task)
        self.assertIsNot(new_task, test_tasks.noop_task)

    def test_chained_using(self) -> None:
        now = timezone.now()

        run_after_task = test_tasks.noop_task.using(run_after=now)
        self.assertEqual(run_after_task.run_after, now)

        priority_task = run_after_task.using(priority=10)
        self.assertEqual(priority_task.priority, 10)
        self.assertEqual(priority_task.run_after, now)

        self.assertEqual(run_after_task.priority, 0)

    async def test_refresh_result(self) -> None:
        result = await test_tasks.noop_task.aenqueue()

        original_result = dataclasses.asdict(result)

        # Adapted (django_jobs): a database backend is not called synchronously from an async
        # context (SynchronousOnlyOperation); the reference backend keeps its results in memory.
        await sync_to_async(result.refresh)()

        self.assertEqual(dataclasses.asdict(result), original_result)

        await result.arefresh()

        self.assertEqual(dataclasses.asdict(result), original_result)

    def test_naive_datetime(self) -> None:
        with self.assertRaisesMessage(InvalidTaskError, "run_after must be an aware datetime"):
            test_tasks.noop_task.using(run_after=datetime.now())

    def test_invalid_priority(self) -> None:
        with self.assertRaisesMessage(
            InvalidTaskError,
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}",
        ):
            test_tasks.noop_task.using(priority=-101)

        with self.assertRaisesMessage(
            InvalidTaskError,
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}",
        ):
            test_tasks.noop_task.using(priority=101)

        with self.assertRaisesMessage(
            InvalidTaskError,
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}",
        ):
            test_tasks.noop_task.using(priority=3.1)  # type:ignore[arg-type]

        test_tasks.noop_task.using(priority=100)
        test_tasks.noop_task.using(priority=-100)
        test_tasks.noop_task.using(priority=0)

    def test_unknown_queue_name(self) -> None:
        with self.assertRaisesMessage(InvalidTaskError, "Queue 'queue-2' is not valid for backend"):
            test_tasks.noop_task.using(queue_name="queue-2")
        # Validation is bypassed when the backend QUEUES is an empty list.
        self.assertEqual(
            test_tasks.noop_task.using(queue_name="queue-2", backend="immediate").queue_name,
            "queue-2",
        )

    def test_call_task(self) -> None:
        self.assertEqual(test_tasks.calculate_meaning_of_life.call(), 42)

    async def test_call_task_async(self) -> None:
        self.assertEqual(await test_tasks.calculate_meaning_of_life.acall(), 42)

    async def test_call_async_task(self) -> None:
        self.assertIsNone(await test_tasks.noop_task_async.acall())

    def test_call_async_task_sync(self) -> None:
        self.assertIsNone(test_tasks.noop_task_async.call())

    def test_get_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.noop_task, (), {})

        new_result = test_tasks.noop_task.get_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.noop_task, (), {})

        new_result = await test_tasks.noop_task.aget_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            # Adapted (django_jobs): a database backend is not called synchronously from an async
            # context (SynchronousOnlyOperation); the reference backend keeps its results in memory.
            await sync_to_async(test_tasks.noop_task.get_result)("123")

        with self.assertRaises(TaskResultDoesNotExist):
            await test_tasks.noop_task.aget_result("123")

    def test_get_incorrect_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.noop_task_async, (), {})
        with self.assertRaisesMessage(TaskResultMismatch, "Task does not match"):
            test_tasks.noop_task.get_result(result.id)

    async def test_get_incorrect_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.noop_task_async, (), {})
        with self.assertRaisesMessage(TaskResultMismatch, "Task does not match"):
            await test_tasks.noop_task.aget_result(result.id)

    def test_invalid_function(self) -> None:
        for invalid_function in [any, self.test_invalid_function]:
            with self.subTest(invalid_function):
                with self.assertRaisesMessage(
                    InvalidTaskError,
                    "Task function must be defined at a module level",
                ):
                    task()(invalid_function)  # type:ignore[arg-type]

    def test_get_backend(self) -> None:
        self.assertEqual(test_tasks.noop_task.backend, "default")
        self.assertIsInstance(test_tasks.noop_task.get_backend(), DummyBackend)

        immediate_task = test_tasks.noop_task.using(backend="immediate")
        self.assertEqual(immediate_task.backend, "immediate")
        self.assertIsInstance(immediate_task.get_backend(), ImmediateBackend)

    def test_name(self) -> None:
        self.assertEqual(test_tasks.noop_task.name, "noop_task")
        self.assertEqual(test_tasks.noop_task_async.name, "noop_task_async")

    def test_module_path(self) -> None:
        # Adapted (django_jobs): the module is tests.upstream.backport.tasks here.
        self.assertEqual(test_tasks.noop_task.module_path, f"{test_tasks.__name__}.noop_task")
        self.assertEqual(test_tasks.noop_task_async.module_path, f"{test_tasks.__name__}.noop_task_async")

        self.assertIs(import_string(test_tasks.noop_task.module_path), test_tasks.noop_task)
        self.assertIs(
            import_string(test_tasks.noop_task_async.module_path),
            test_tasks.noop_task_async,
        )

    @override_settings(TASKS={})
    def test_no_backends(self) -> None:
        with self.assertRaises(InvalidTaskBackendError):
            test_tasks.noop_task.enqueue()

    def test_task_error_invalid_exception(self) -> None:
        with self.assertLogs("django_tasks"):
            immediate_task = test_tasks.failing_task_value_error.using(backend="immediate").enqueue()

        self.assertEqual(len(immediate_task.errors), 1)

        object.__setattr__(immediate_task.errors[0], "exception_class_path", "subprocess.run")

        with self.assertRaisesMessage(ValueError, "'subprocess.run' does not reference a valid exception."):
            immediate_task.errors[0].exception_class  # noqa: B018

    def test_task_error_unknown_module(self) -> None:
        with self.assertLogs("django_tasks"):
            immediate_task = test_tasks.failing_task_value_error.using(backend="immediate").enqueue()

        self.assertEqual(len(immediate_task.errors), 1)

        object.__setattr__(immediate_task.errors[0], "exception_class_path", "does.not.exist")

        with self.assertRaises(ImportError):
            immediate_task.errors[0].exception_class  # noqa: B018

    def test_takes_context_without_taking_context(self) -> None:
        with self.assertRaisesMessage(
            InvalidTaskError,
            "Task takes context but does not have a first argument of 'context'",
        ):
            task(takes_context=True)(test_tasks.calculate_meaning_of_life.func)  # type: ignore[arg-type]
