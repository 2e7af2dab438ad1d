"""``DJANGO_JOBS["QUEUES"]``: once the project declares its queues, a job can only go to one of
them — a typo is refused at enqueue with the closest name, and ``check`` finds the queues the
code and the settings name outside them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings

from django_jobs import InvalidOption, UnknownQueue, enqueue, enqueue_many, job
from django_jobs.checks import check_declared_queues
from django_jobs.models import Job
from django_jobs.registry import registry
from django_jobs.tasks_framework import api as taskapi
from testproject.testjobs import tasks

pytestmark = pytest.mark.django_db

#: The queues the test project's job types and its Tasks backend use.
PROJECT_QUEUES = ["default", "emails", "integrations", "reports"]


def declaring(queues: Any, **more: Any) -> Any:
    return override_settings(DJANGO_JOBS={"QUEUES": queues, **more})


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


@pytest.fixture
def report_type() -> Iterator[str]:
    """A job type of its own queue, outside the declared ones unless a test declares it."""

    @job("test.quarterly_report", queue="reportz")
    def quarterly_report(ctx: Any, payload: dict[str, Any]) -> None:
        pass

    yield "test.quarterly_report"
    registry.unregister("test.quarterly_report")


# ---- at enqueue ----------------------------------------------------------------------------------


def test_a_misspelt_queue_is_refused_with_the_closest_declared_name_and_nothing_is_written() -> None:
    with declaring(PROJECT_QUEUES), pytest.raises(UnknownQueue) as refused, transaction.atomic():
        enqueue("test.noop", {}, queue="defualt")
    assert str(refused.value) == (
        "queue 'defualt' is not declared in DJANGO_JOBS['QUEUES'] (default, emails, integrations, "
        "reports): did you mean 'default'?; nothing was enqueued"
    )
    assert isinstance(refused.value, InvalidOption)  # callers that catch bad options catch it
    assert not Job.objects.exists()


def test_a_queue_like_none_of_the_declared_ones_is_refused_without_a_guess() -> None:
    with declaring(["default"]), pytest.raises(UnknownQueue, match=r"\(default\); nothing was enqueued"):
        enqueue("test.noop", {}, queue="billing")


def test_every_job_of_a_bulk_enqueue_is_refused_with_it() -> None:
    with declaring(PROJECT_QUEUES), pytest.raises(UnknownQueue, match="did you mean 'emails'"):
        enqueue_many("test.noop", [{}, {}, {}], queue="emials")
    assert not Job.objects.exists()


def test_a_job_types_own_undeclared_queue_is_refused(report_type: str) -> None:
    with declaring(PROJECT_QUEUES), pytest.raises(UnknownQueue, match="did you mean 'reports'"):
        enqueue(report_type, {})
    with declaring([*PROJECT_QUEUES, "reportz"]):
        assert enqueue(report_type, {}).queue == "reportz"


def test_a_task_for_a_queue_its_backend_accepts_but_the_project_does_not_declare_is_refused() -> None:
    refusal = r"queue 'reports' is not declared in DJANGO_JOBS\['QUEUES'\] \(default, emails\)"
    with declaring(["default", "emails"]), pytest.raises(taskapi.InvalidTask, match=refusal):
        tasks.echo.using(queue_name="reports").enqueue(1)
    assert not Job.objects.exists()


def test_declared_queues_are_accepted_and_undeclared_ones_are_free_without_the_setting() -> None:
    with declaring(PROJECT_QUEUES):
        assert enqueue("test.noop", {}, queue="emails").queue == "emails"
        assert enqueue("test.noop", {}).queue == "default"
    assert enqueue("test.noop", {}, queue="defualt").queue == "defualt"  # as before: not declared


# ---- at start-up ---------------------------------------------------------------------------------


def test_the_project_declaring_every_queue_it_uses_passes() -> None:
    assert check_declared_queues() == []  # nothing declared
    with declaring(PROJECT_QUEUES):
        assert check_declared_queues() == []


@pytest.mark.parametrize("value", ["default", [], ["default", "no spaces"], [None], {"default": 1}, 5])
def test_a_malformed_declaration_is_an_error(value: Any) -> None:
    with declaring(value):
        assert ids(check_declared_queues()) == ["django_jobs.E070"]


def test_a_job_type_in_an_undeclared_queue_is_an_error(report_type: str) -> None:
    with declaring(PROJECT_QUEUES):
        messages = check_declared_queues()
    assert ids(messages) == ["django_jobs.E071"]
    assert messages[0].obj is registry.get(report_type).handler  # type: ignore[union-attr]
    assert "Job type 'test.quarterly_report': queue 'reportz' is not declared" in messages[0].msg
    assert "did you mean 'reports'?" in messages[0].msg


def test_a_tasks_backend_queue_outside_the_declared_ones_is_an_error() -> None:
    with declaring(["default", "emails", "integrations"]):
        messages = check_declared_queues()
    assert [(m.id, m.msg.split(":")[0]) for m in messages] == [
        ("django_jobs.E071", "Job type 'demo.generate_report'"),
        ("django_jobs.E071", "Job type 'demo.import_legacy_file'"),
        ("django_jobs.E071", "Job type 'demo.nightly_report'"),
        ("django_jobs.E072", "TASKS['default']['QUEUES']"),
    ]
    assert "queue 'reports' is not declared" in messages[-1].msg


def test_the_default_queue_and_a_schedules_queue_outside_the_declared_ones_are_errors() -> None:
    schedules = {"nightly": {"type": "test.noop", "cron": "0 3 * * *", "queue": "nigthly"}}
    with declaring([*PROJECT_QUEUES, "nightly"], DEFAULT_QUEUE="billing", SCHEDULES=schedules):
        messages = check_declared_queues()
    assert [m.msg for m in messages if m.id == "django_jobs.E073"] == [
        "DJANGO_JOBS['DEFAULT_QUEUE']: queue 'billing' is not declared in DJANGO_JOBS['QUEUES'] "
        "(default, emails, integrations, nightly, reports)",
        "DJANGO_JOBS['SCHEDULES']['nightly']['queue']: queue 'nigthly' is not declared in "
        "DJANGO_JOBS['QUEUES'] (default, emails, integrations, nightly, reports): did you mean 'nightly'?",
    ]
