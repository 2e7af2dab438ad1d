# ruff: noqa  # vendored from django-tasks-db 0.13.0 (tests/tests.py), BSD licence: see LICENSE.
# Retargeted at django_jobs' JobsBackend; every change is marked "Adapted (django_jobs)".
"""django-tasks-db's tests of its database backend, run against ``JobsBackend``.

Of the suite's 95 tests, 44 are vendored: the tests of the backend contract, from
``DatabaseBackendTestCase``, ``DatabaseBackendWorkerTestCase``, ``DatabaseTaskResultTestCase``
and ``DatabaseWorkerProcessTestCase``. The reference's table (``DBTaskResult``) is
``django_jobs.models.Job`` here; its worker (``db_worker --batch``) is a burst worker run in
this process (``django_jobs.testing.run_jobs``: the same claim, executor and outcome writer as
``runjobs --burst``), or a real ``runjobs --burst`` process in the process tests.

The other 51 are left out, as they are about django-tasks-db itself, not about the backend
contract:

- ``DatabaseBackendTestCase``: ``test_task_name`` (a property of the reference's model, for its
  admin); ``test_run_after_null_0016_migration`` (a value one of its migrations wrote);
  ``test_custom_id_function``, ``test_unknown_id_function``, ``test_postgres_db_id_function``,
  ``test_postgres_id_function_expression`` (its ``id_function`` option: a result's id here is
  its job's primary key).
- ``DatabaseBackendWorkerTestCase``: ``test_process_all_queues_excluding_one_queue``,
  ``test_exclude_queues_requires_processing_all_queues``,
  ``test_excluding_unknown_queue_processes_selected_queues``,
  ``test_doesnt_process_different_backend``, ``test_unknown_backend``,
  ``test_incorrect_backend``, ``test_negative_interval``, ``test_infinite_interval``,
  ``test_fractional_interval``, ``test_zero_interval``, ``test_negative_max_tasks``,
  ``test_zero_max_tasks``, ``test_too_long_worker_id``, ``test_empty_worker_id``,
  ``test_max_tasks``, ``test_verbose_logging`` (the options and output of its ``db_worker``
  command; ``runjobs``' own are tested in ``tests/process/test_runjobs.py``).
- ``DatabaseTaskResultTestCase``: ``test_locks_tasks``, ``test_locks_tasks_filtered``,
  ``test_lock_no_rows``, ``test_get_locked_with_locked_rows`` (its model manager's
  ``get_locked()``; the claim's ``SKIP LOCKED`` is ``test_worker_with_locked_rows`` below and
  ``tests/concurrency/test_claim_race.py``); ``test_locks_tasks_sqlite``, ``test_locks_tasks_filtered_sqlite``
  (SQLite).
- ``ConnectionExclusiveTranscationTestCase`` (SQLite's exclusive transactions).
- ``DatabaseBackendPruneTaskResultsTestCase``, all 12 tests (its ``prune_db_task_results``
  command; retention here is the reaper's, ``tests/db/test_reaper.py``).
- ``DatabaseWorkerProcessTestCase``: ``test_interrupt_no_tasks``, ``test_interrupt_signals``,
  ``test_repeat_ctrl_c``, ``test_kill`` (how its ``db_worker`` process answers SIGINT, SIGTERM
  and SIGKILL; ``runjobs``' answers are tested on real processes in
  ``tests/process/test_crashes.py`` and ``tests/process/test_tasks_crash.py``. Its
  ``test_kill`` asserts the reference's known gap, a killed worker's task left ``RUNNING`` for
  ever, which the reaper here closes). Its ``test_system_exit_task`` and
  ``test_keyboard_interrupt_task`` are about what the task raises, so they run on the burst
  worker of ``DatabaseBackendWorkerTestCase``.
- ``CompatTestCase`` (its compat module), ``DBTaskResultOrderingTestCase`` (its model's default
  ordering; the claim order is ``test_run_after_priority`` below), ``AdminTestCase`` (its admin).
"""

import contextlib
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.utils import IntegrityError
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.test import TransactionTestCase, override_settings
from django.utils import timezone

try:
    from django.tasks import TaskResultStatus, default_task_backend, task_backends
    from django.tasks.base import Task
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued

    LOGGER = "django.tasks"
except (ImportError, ModuleNotFoundError):
    from django_tasks import (  # type: ignore[assignment,no-redef,unused-ignore]
        TaskResultStatus,
        default_task_backend,
        task_backends,
    )
    from django_tasks.base import (  # type: ignore[assignment,no-redef,unused-ignore]
        Task,
    )
    from django_tasks.exceptions import (  # type: ignore[assignment,no-redef,unused-ignore]
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import (  # type: ignore[assignment,no-redef,unused-ignore]
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (  # type: ignore[assignment,no-redef,unused-ignore]
        task_enqueued,
    )

    LOGGER = "django_tasks"


# Adapted (django_jobs): the reference backend, its table and its worker are JobsBackend, the
# job table and a burst worker.
from django_jobs.tasks_framework.backend import JobsBackend as DatabaseBackend
from django_jobs.models import Job as DBTaskResult
from django_jobs.testing import run_jobs
from tests.upstream.backends import IMMEDIATE_OPTIONS

# Adapted (django_jobs): the module is tests.upstream.tasks_db.tasks here.
from . import tasks as test_tasks


# Adapted (django_jobs): the reference's ready() is the jobs a worker could claim now.
def ready() -> QuerySet[DBTaskResult]:
    return DBTaskResult.objects.claimable()


# Adapted (django_jobs): the project's TASKS setting, as the suite's settings module has it.
@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default", "queue-1"],
        }
    }
)
class DatabaseBackendTestCase(TransactionTestCase):
    @contextlib.contextmanager
    def _capture_task_enqueued_signal(
        self,
    ) -> Iterator[list[tuple[type[DatabaseBackend], Any]]]:
        received: list[tuple[type[DatabaseBackend], Any]] = []

        def capture_signal(sender: type[DatabaseBackend], task_result: Any, **kwargs: Any) -> None:
            received.append((sender, task_result))

        task_enqueued.connect(capture_signal, dispatch_uid="db_enqueue_signal", weak=False)
        try:
            yield received
        finally:
            task_enqueued.disconnect(capture_signal, dispatch_uid="db_enqueue_signal")

    def get_task_count_in_new_connection(self) -> int:
        """
        See what other connections see
        """
        new_connection = connections.create_connection("default")
        try:
            with new_connection.cursor() as c:
                c.execute(str(DBTaskResult.objects.values("id").query))
                return len(c.fetchall())
        finally:
            new_connection.close()

    def test_using_correct_backend(self) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], DatabaseBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_enqueue_task(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task), self.assertNumQueries(1):
                with self._capture_task_enqueued_signal() as received:
                    result = cast(Task, task).enqueue(1, two=3)

                # Adapted (django_jobs): a result's id is its job's primary key, not a UUID.
                self.assertEqual(result.id, str(int(result.id)))
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa:B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(received, [(DatabaseBackend, result)])

    async def test_enqueue_task_async(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                with self._capture_task_enqueued_signal() as received:
                    result = await cast(Task, task).aenqueue()

                # Adapted (django_jobs): a result's id is its job's primary key, not a UUID.
                self.assertEqual(result.id, str(int(result.id)))
                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa:B018
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

                self.assertEqual(received, [(DatabaseBackend, result)])

    def test_get_result(self) -> None:
        with self.assertNumQueries(1):
            result = default_task_backend.enqueue(test_tasks.noop_task, [], {})

        with self.assertNumQueries(1):
            new_result = default_task_backend.get_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.noop_task, [], {})

        new_result = await default_task_backend.aget_result(result.id)

        self.assertEqual(result, new_result)

    # Adapted (django_jobs): the job's row, written as the worker's completion writes it.
    def _complete_in_the_table(self) -> dict[str, Any]:
        return dict(
            status="completed",
            started_at=Now(),
            completed_at=Now(),
            finished_at=Now(),
            return_value=42,
            attempts=1,
            worker_id=uuid.uuid4().hex,
        )

    def test_refresh_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, [], {})

        # Adapted (django_jobs): the job's row, written as the worker's completion writes it.
        DBTaskResult.objects.all().update(**self._complete_in_the_table())

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        with self.assertNumQueries(1):
            result.refresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    async def test_refresh_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, [], {})

        # Adapted (django_jobs): the job's row, written as the worker's completion writes it.
        await DBTaskResult.objects.all().aupdate(**self._complete_in_the_table())

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        await result.arefresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    def test_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(uuid.uuid4()))

    async def test_async_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result(str(uuid.uuid4()))

    def test_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("123")

    async def test_async_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123")

    # Adapted (django_jobs): a job row stands for the reference's result row, and the backend's
    # get_result() for its model's `task` property. A stored path that names no Task is never
    # imported as one: there is no task result to give, rather than the reference's
    # SuspiciousOperation (an error of its model, not of the backend's API).
    def test_invalid_task_path(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            payload={"args": [["exit", "1"]], "kwargs": {}},
            type="subprocess.check_output",
            queue="default",
        )

        with self.assertRaisesMessage(
            TaskResultDoesNotExist,
            f"job {db_task_result.id} is not a task of Django's Tasks framework",
        ):
            default_task_backend.get_result(str(db_task_result.id))

    # Adapted (django_jobs): as test_invalid_task_path; the reference's model raises ImportError.
    def test_missing_task_path(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            payload={"args": [], "kwargs": {}},
            type="missing.func",
            queue="default",
        )

        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(db_task_result.id))

    def test_check(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 0, errors)

    @override_settings(INSTALLED_APPS=[])
    def test_database_backend_app_missing(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 1)
        # Adapted (django_jobs): the app this backend needs is django_jobs.
        self.assertIn("django_jobs", errors[0].hint)

    # Adapted (django_jobs): the job table's constraint, written through its model; a job row
    # needs a type, a queue and a payload where the reference's needs a path and a backend.
    def test_priority_range_check(self) -> None:
        with self.assertRaises(IntegrityError):
            DBTaskResult.objects.create(type="", queue="default", priority=-101, payload={})

        with self.assertRaises(IntegrityError):
            DBTaskResult.objects.create(type="", queue="default", priority=101, payload={})

        # Django accepts the float, but only stores an int
        result = DBTaskResult.objects.create(type="", queue="default", priority=3.1, payload={})
        result.refresh_from_db()
        self.assertEqual(result.priority, 3)

        DBTaskResult.objects.create(type="", queue="default", priority=100, payload={})
        DBTaskResult.objects.create(type="", queue="default", priority=-100, payload={})
        DBTaskResult.objects.create(type="", queue="default", priority=0, payload={})

    # Adapted (django_jobs): the class's TASKS setting is JobsBackend's already.
    def test_doesnt_wait_until_transaction_commit(self) -> None:
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            self.assertEqual(DBTaskResult.objects.count(), 1)

            # SQLite locks the table during this transaction
            if connection.vendor != "sqlite":
                self.assertEqual(self.get_task_count_in_new_connection(), 0)

        if connection.vendor != "sqlite":
            self.assertEqual(self.get_task_count_in_new_connection(), 1)

    def test_enqueue_logs(self) -> None:
        with self.assertLogs(LOGGER, level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()

        self.assertEqual(len(captured_logs.output), 1)
        self.assertIn("enqueued", captured_logs.output[0])
        self.assertIn(result.id, captured_logs.output[0])

    def test_index_scan_for_ready(self) -> None:
        test_tasks.noop_task.enqueue()

        # Quickly duplicate tasks
        # Adapted (django_jobs): in one statement (5,000 model instances take seconds to build).
        columns = "queue, type, version, payload, status, priority, attempts, max_attempts"
        with connection.cursor() as c:
            c.execute(
                f"INSERT INTO {DBTaskResult._meta.db_table} ({columns}) "
                f"SELECT {columns} FROM {DBTaskResult._meta.db_table}, generate_series(1, 5000)"
            )
        self.assertEqual(ready().count(), 5001)

        # Update query plan for certain databases
        with connection.cursor() as c:
            c.execute(f"ANALYZE {DBTaskResult._meta.db_table};")

        # Adapted (django_jobs): what reads the ready tasks is the claim of a worker that serves
        # every queue, one scan of the claim index per kind of job it runs (ready(), the
        # claim's rule as a filter, is a diagnosis and may read the table).
        from django_jobs.registry import registry
        from django_jobs.transitions import ClaimStatement
        from django_jobs.transitions.claimable import claim_inputs

        inputs = claim_inputs(registry.all())
        statement = ClaimStatement("w", None, inputs.versions, inputs.leases, inputs.oldest, inputs.rate_limits)
        with connection.cursor() as c:
            c.execute("EXPLAIN " + statement.sql, statement.params(10))
            plan = "\n".join(row[0] for row in c.fetchall())

        self.assertIn("Index Scan using django_jobs_ready on django_jobs_job", plan)
        self.assertNotIn("Seq Scan on django_jobs_job", plan)

    def test_run_after_tz(self) -> None:
        for use_tz in [True, False]:
            with self.subTest(use_tz=use_tz):
                with override_settings(USE_TZ=use_tz):
                    result = test_tasks.noop_task.enqueue()
                    # Adapted (django_jobs): the task as the backend reads it back.
                    self.assertIsNone(default_task_backend.get_result(result.id).task.run_after)

    def test_validate_on_enqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": "django_jobs.backend.JobsBackend",
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
            task_with_custom_queue_name.enqueue()

    async def test_validate_on_aenqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": "django_jobs.backend.JobsBackend",
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
            await task_with_custom_queue_name.aenqueue()


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
            "QUEUES": ["default", "queue-1"],
            # Adapted (django_jobs): one attempt, as the reference backend makes.
            "OPTIONS": IMMEDIATE_OPTIONS,
        },
    }
)
class DatabaseBackendWorkerTestCase(TransactionTestCase):
    # Adapted (django_jobs): `db_worker --batch` is a burst worker, run here; it serves the
    # default queue unless told otherwise, as the reference's does. The reference's counts of
    # the worker's queries are its own and are not asserted.
    @staticmethod
    def run_worker(queue_name: str = "default") -> Any:
        return run_jobs(queues=None if queue_name == "*" else queue_name.split(","))

    def test_run_enqueued_task(self) -> None:
        for task in [
            test_tasks.noop_task,
            # test_tasks.noop_task_async,
        ]:
            with self.subTest(task):
                result = cast(Task, task).enqueue()
                self.assertEqual(ready().count(), 1)

                self.assertEqual(result.status, TaskResultStatus.READY)

                self.run_worker()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertEqual(result.attempts, 0)
                result.refresh()
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type:ignore[arg-type,misc]
                self.assertGreaterEqual(result.finished_at, result.started_at)  # type:ignore[arg-type,misc]
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertEqual(result.attempts, 1)

                self.assertEqual(ready().count(), 0)

    def test_batch_processes_all_tasks(self) -> None:
        for _ in range(3):
            test_tasks.noop_task.enqueue()
        test_tasks.failing_task_value_error.enqueue()

        self.assertEqual(ready().count(), 4)

        self.run_worker()

        self.assertEqual(ready().count(), 0)
        # Adapted (django_jobs): the job statuses for the reference's successful() and failed().
        self.assertEqual(DBTaskResult.objects.filter(status="completed").count(), 3)
        self.assertEqual(DBTaskResult.objects.failed().count(), 1)

    def test_no_tasks(self) -> None:
        # Adapted (django_jobs): the reference asserts its worker's query count; here, that
        # the worker claimed nothing and exited.
        stats = self.run_worker()
        self.assertEqual(stats.claimed, 0)

    def test_doesnt_process_different_queue(self) -> None:
        result = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(ready().count(), 1)

        self.run_worker()

        self.assertEqual(ready().count(), 1)

        self.run_worker(queue_name=result.task.queue_name)

        self.assertEqual(ready().count(), 0)

    def test_process_all_queues(self) -> None:
        test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        self.assertEqual(ready().count(), 1)

        self.run_worker()

        self.assertEqual(ready().count(), 1)

        self.run_worker(queue_name="*")

        self.assertEqual(ready().count(), 0)

    def test_failing_task(self) -> None:
        result = test_tasks.failing_task_value_error.enqueue()
        self.assertEqual(ready().count(), 1)

        self.run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)

        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type: ignore
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type: ignore
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018

        self.assertEqual(result.errors[0].exception_class, ValueError)
        traceback = result.errors[0].traceback
        self.assertTrue(
            traceback and traceback.endswith("ValueError: This task failed due to ValueError\n"),
            traceback,
        )

        self.assertEqual(ready().count(), 0)

    def test_complex_exception(self) -> None:
        result = test_tasks.complex_exception.enqueue()
        self.assertEqual(ready().count(), 1)

        self.run_worker()

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)

        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type: ignore
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type: ignore
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value  # noqa: B018

        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn('ValueError(ValueError("This task failed"))', result.errors[0].traceback)

        self.assertEqual(ready().count(), 0)

    def test_complex_return_value(self) -> None:
        result = test_tasks.complex_return_value.enqueue()

        self.run_worker()

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)  # type:ignore[arg-type,misc]
        self.assertGreaterEqual(result.finished_at, result.started_at)  # type:ignore[arg-type,misc]

        self.assertIsNone(result._return_value)  # type: ignore[attr-defined]
        self.assertEqual(result.errors[0].exception_class, TypeError)
        # Adapted (django_jobs): the return value is checked by the framework's normalize_json(),
        # as by Django's own backends, not by json.dumps(); the error is its message.
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_run_after(self) -> None:
        result = test_tasks.noop_task.using(run_after=timezone.now() + timedelta(hours=10)).enqueue()

        self.assertEqual(DBTaskResult.objects.count(), 1)
        self.assertEqual(ready().count(), 0)

        self.run_worker()

        self.assertEqual(DBTaskResult.objects.count(), 1)
        self.assertEqual(ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.filter(status="completed").count(), 0)

        # Adapted (django_jobs): a job's run_after is its available_at.
        DBTaskResult.objects.filter(id=result.id).update(available_at=timezone.now())

        self.assertEqual(ready().count(), 1)

        self.run_worker()

        self.assertEqual(ready().count(), 0)
        self.assertEqual(DBTaskResult.objects.filter(status="completed").count(), 1)

    def test_run_after_priority(self) -> None:
        old_task = test_tasks.noop_task.using(
            priority=20, run_after=timezone.now() - timedelta(hours=2)
        ).enqueue()

        very_old_task = test_tasks.noop_task.using(
            priority=20, run_after=timezone.now() - timedelta(hours=10)
        ).enqueue()

        far_future_result = test_tasks.noop_task.using(
            run_after=timezone.now() + timedelta(hours=10)
        ).enqueue()

        high_priority_far_future_result = test_tasks.noop_task.using(
            priority=10, run_after=timezone.now() + timedelta(hours=10)
        ).enqueue()

        future_result = test_tasks.noop_task.using(run_after=timezone.now() + timedelta(hours=2)).enqueue()

        high_priority_result = test_tasks.noop_task.using(priority=10).enqueue()

        low_priority_result = test_tasks.noop_task.using(priority=2).enqueue()
        lower_priority_result = test_tasks.noop_task.using(priority=-2).enqueue()

        # Adapted (django_jobs): the reference's model ordering of every row (all()) is its
        # own; the order of the ready ones is the order a worker claims them in.
        self.assertEqual(
            [str(job_id) for job_id in ready().values_list("id", flat=True)],
            [
                result.id
                for result in [
                    very_old_task,
                    old_task,
                    high_priority_result,
                    low_priority_result,
                    lower_priority_result,
                ]
            ],
        )

    # Adapted (django_jobs): a job row stands for the reference's result row. A worker never
    # claims a job of a type it has no handler for (a rolling deploy's newer type is another
    # worker's to run): the reference fails the row, here it is left pending, never run.
    def test_invalid_task_path(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            payload={"args": [["exit", "1"]], "kwargs": {}},
            type="subprocess.check_output",
            queue="default",
        )

        self.run_worker()

        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, "pending")
        self.assertEqual(db_task_result.attempts, 0)

    # Adapted (django_jobs): as test_invalid_task_path.
    def test_missing_task_path(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            payload={"args": [], "kwargs": {}},
            type="missing.func",
            queue="default",
        )

        self.run_worker()

        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, "pending")
        self.assertEqual(db_task_result.attempts, 0)

    def test_worker_doesnt_exit_on_failure(self) -> None:
        result = test_tasks.exit_task.enqueue()

        self.run_worker()

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)

    # Adapted (django_jobs): from DatabaseWorkerProcessTestCase, whose worker is a process;
    # here the burst worker runs in this one, and the task's SystemExit is its outcome.
    def test_system_exit_task(self) -> None:
        result = test_tasks.failing_task_system_exit.enqueue()

        self.run_worker()

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, SystemExit)

    # Adapted (django_jobs): as test_system_exit_task.
    def test_keyboard_interrupt_task(self) -> None:
        result = test_tasks.failing_task_keyboard_interrupt.enqueue()

        self.run_worker()

        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)

    def test_worker_with_locked_rows(self) -> None:
        result_1 = test_tasks.noop_task.enqueue()
        new_connection = connections.create_connection("default")

        with transaction.atomic():
            locked_tasks_query = str(DBTaskResult.objects.select_for_update().query)

        try:
            # Start a transaction in the other connection
            with new_connection.cursor() as c:
                c.execute("BEGIN")

            # Lock the current rows in the table
            with new_connection.cursor() as c:
                c.execute(locked_tasks_query)
                results = list(c.fetchall())
            self.assertEqual(len(results), 1)

            # Add another task which isn't locked
            result_2 = test_tasks.noop_task.enqueue()

            self.run_worker()
        finally:
            new_connection.close()

        result_1.refresh()
        result_2.refresh()

        self.assertEqual(result_1.status, TaskResultStatus.READY)
        self.assertEqual(result_2.status, TaskResultStatus.SUCCESSFUL)

    def test_takes_context(self) -> None:
        result = test_tasks.get_task_id.enqueue()

        self.run_worker()

        result.refresh()

        self.assertEqual(result.return_value, result.id)

    def test_context(self) -> None:
        result = test_tasks.test_context.enqueue(1)

        self.run_worker()
        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    # Adapted (django_jobs): as test_invalid_task_path; the reference fails the row with an
    # ImportError.
    def test_task_import_string(self) -> None:
        db_task_result = DBTaskResult.objects.create(
            payload={"args": [], "kwargs": {}},
            type="tests.upstream.tasks_db.tasks.some_test",
            queue="default",
        )
        self.run_worker()
        db_task_result.refresh_from_db()

        self.assertEqual(db_task_result.status, "pending")
        self.assertEqual(db_task_result.attempts, 0)


# Adapted (django_jobs): the project's TASKS setting, as the suite's settings module has it.
@override_settings(
    TASKS={
        "default": {
            "BACKEND": "django_jobs.backend.JobsBackend",
        },
    }
)
class DatabaseTaskResultTestCase(TransactionTestCase):
    def execute_in_new_connection(self, sql: str | QuerySet) -> Sequence:
        if isinstance(sql, QuerySet):
            sql = str(sql.query)
        new_connection = connections.create_connection("default")
        try:
            with new_connection.cursor() as c:
                c.execute(sql)
                return cast(list, c.fetchall())
        finally:
            new_connection.close()

    def test_cross_connection(self) -> None:
        test_tasks.noop_task.enqueue()
        test_tasks.noop_task.enqueue()

        self.assertEqual(DBTaskResult.objects.count(), 2)

        self.assertEqual(DBTaskResult.objects.using("default").count(), 2)

        self.assertEqual(
            len(self.execute_in_new_connection(DBTaskResult.objects.all())),
            2,
        )


# Adapted (django_jobs): a `runjobs` process imports the tasks modules of installed apps, and
# this module is none: the process imports it, then runs `runjobs --burst`.
WORKER_PROGRAM = (
    "import django; django.setup(); "
    "import tests.upstream.tasks_db.tasks; "
    "from django.core.management import call_command; "
    "call_command('runjobs', '--burst')"
)


# Adapted (django_jobs): the project's TASKS setting, as the worker processes have it.
@pytest.mark.slow
class DatabaseWorkerProcessTestCase(TransactionTestCase):
    def setUp(self) -> None:
        self.processes: list[subprocess.Popen] = []

    def tearDown(self) -> None:
        # Adapted (django_jobs): a process still running is killed once and waited for.
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)

    # Adapted (django_jobs): `runjobs --burst` on the test database, in the project's directory.
    def start_worker(self) -> subprocess.Popen:
        db = settings.DATABASES["default"]
        database_url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        p = subprocess.Popen(
            [sys.executable, "-c", WORKER_PROGRAM],
            cwd=Path(__file__).resolve().parents[3],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "DATABASE_URL": database_url,
                "DJANGO_SETTINGS_MODULE": "testproject.settings",
            },
            text=True,
        )
        self.processes.append(p)
        return p

    def test_run_subprocess(self) -> None:
        result = test_tasks.noop_task.enqueue()
        process = self.start_worker()
        # Adapted (django_jobs): a deadline for a process's start on a loaded machine.
        output, _ = process.communicate(timeout=60)
        self.assertEqual(process.returncode, 0, output)

        self.assertEqual(result.status, TaskResultStatus.READY)

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_multiple_workers(self) -> None:
        results = [test_tasks.sleep_for.enqueue(0.1) for _ in range(10)]

        for _ in range(3):
            self.start_worker()

        # Adapted (django_jobs): burst workers exit by themselves once nothing is claimable;
        # the test waits for that, with a deadline, instead of sleeping a start-up time.
        for process in self.processes:
            output, _ = process.communicate(timeout=60)
            self.assertEqual(process.returncode, 0, output)

        for result in results:
            result.refresh()
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        # Adapted (django_jobs): the reference counts each id in its workers' verbose logs
        # (once running, once successful); here each task ran exactly once, by one worker.
        for result in results:
            self.assertEqual(result.attempts, 1)
            self.assertEqual(len(result.worker_ids), 1)
