from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_jobs import job
from django_jobs.checks import check_database, check_pooling, check_settings, check_upcasters
from django_jobs.registry import registry
from tests.process.workers import ROOT

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/django_jobs"


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def test_default_settings_pass() -> None:
    assert check_settings() == []


def test_valid_retention_and_queue_pass() -> None:
    good = {"RETENTION": {"completed": 3600, "failed": None, "cancelled": 0.5}, "DEFAULT_QUEUE": "emails:eu"}
    with override_settings(DJANGO_JOBS=good):
        assert check_settings() == []


@pytest.mark.parametrize("alias", ["replica", "default", None])
def test_a_console_database_that_names_an_alias_passes(alias: str | None) -> None:
    with override_settings(DJANGO_JOBS={"CONSOLE_DATABASE": alias}):
        assert check_settings() == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not a dict", ["django_jobs.E001"]),
        ({"LEASE_TIMOUT": 5}, ["django_jobs.E002"]),
        ({"POLL_INTERVAL": 0}, ["django_jobs.E003"]),
        ({"POLL_INTERVAL": "1"}, ["django_jobs.E003"]),
        ({"BATCH_SIZE": 2.5}, ["django_jobs.E004"]),
        ({"BACKOFF_JITTER": 2}, ["django_jobs.E005"]),
        ({"HEARTBEAT_INTERVAL": 30, "LEASE_TIMEOUT": 10}, ["django_jobs.E006"]),
        ({"LEASE_TIMEOUT": float("inf")}, ["django_jobs.E003"]),
        ({"POLL_INTERVAL": float("nan")}, ["django_jobs.E003"]),
        ({"REAPER_INTERVAL": True}, ["django_jobs.E003"]),
        ({"MAX_PAYLOAD_BYTES": -1}, ["django_jobs.E004"]),
        ({"RETENTION": {"complete": 10}}, ["django_jobs.E012"]),  # a typo of "completed"
        ({"RETENTION": {"needs_review": 10}}, ["django_jobs.E012"]),  # never pruned
        ({"RETENTION": [("completed", 10)]}, ["django_jobs.E012"]),
        ({"RETENTION": {"completed": "3 days"}}, ["django_jobs.E013"]),
        ({"RETENTION": {"completed": -5}}, ["django_jobs.E013"]),
        ({"RETENTION": {"failed": float("nan")}}, ["django_jobs.E013"]),
        ({"DEFAULT_QUEUE": "my queue"}, ["django_jobs.E014"]),
        ({"DEFAULT_QUEUE": 7}, ["django_jobs.E014"]),
        ({"NOTIFY": "no"}, ["django_jobs.E015"]),
        ({"CONSOLE_DATABASE": "replcia"}, ["django_jobs.E051"]),  # a typo of an alias
        ({"CONSOLE_DATABASE": 1}, ["django_jobs.E051"]),
        ({"LISTEN_DATABASE": "dirct"}, ["django_jobs.E052"]),  # a typo of an alias
        ({"LISTEN_DATABASE": 5432}, ["django_jobs.E052"]),
        ({"CHECK_OLDEST_DUE_WARNING": 0}, ["django_jobs.E040"]),
        ({"CHECK_OLDEST_DUE_CRITICAL": "30m"}, ["django_jobs.E040"]),
        ({"CHECK_STALE_REAPER_INTERVALS": float("inf")}, ["django_jobs.E040"]),
        ({"CHECK_HORIZON_WARNING": -5}, ["django_jobs.E040"]),
        ({"CHECK_HORIZON_WARNING": "5 minutes"}, ["django_jobs.E040"]),
        ({"CHECK_HORIZON_XIDS": 0}, ["django_jobs.E004"]),
        ({"CHECK_HORIZON_XIDS": 1e6}, ["django_jobs.E004"]),  # a count, not a float
        ({"CHECK_OLDEST_DUE_WARNING": 600, "CHECK_OLDEST_DUE_CRITICAL": 60}, ["django_jobs.E041"]),
        ({"CHECK_OLDEST_DUE_WARNING": 1800}, ["django_jobs.E041"]),  # equal to the default critical
        ({"SENSITIVE_PAYLOAD_KEYS": "token"}, ["django_jobs.E011"]),  # a string, not a list of them
        ({"SENSITIVE_PAYLOAD_KEYS": ["card", "(unclosed"]}, ["django_jobs.E011"]),
        ({"SENSITIVE_PAYLOAD_KEYS": [3]}, ["django_jobs.E011"]),
        ({"METRICS_TOKEN": "short"}, ["django_jobs.E030"]),  # guessable
        ({"METRICS_TOKEN": " " * 20}, ["django_jobs.E030"]),
        ({"METRICS_TOKEN": 1234567890123456789}, ["django_jobs.E030"]),
        ({"METRICS_MAX_LABEL_VALUES": 0}, ["django_jobs.E004"]),  # every value would be "other"
        ({"METRICS_MAX_LABEL_VALUES": 10.5}, ["django_jobs.E004"]),
        ({"LIVENESS_STALL_LIMIT": 0}, ["django_jobs.E031"]),
        ({"LIVENESS_OUTAGE_LIMIT": "60"}, ["django_jobs.E031"]),
        ({"LIVENESS_STUCK_LIMIT": float("inf")}, ["django_jobs.E031"]),
        ({"TCP_USER_TIMEOUT": 0}, ["django_jobs.E020"]),  # libpq would read it as "off"
        ({"STATEMENT_TIMEOUT": "30s"}, ["django_jobs.E020"]),
        ({"CONNECT_TIMEOUT": -1}, ["django_jobs.E020"]),
        ({"TCP_KEEPALIVES_COUNT": 2.5}, ["django_jobs.E021"]),
        ({"TCP_KEEPALIVES_COUNT": True}, ["django_jobs.E021"]),
    ],
)
def test_invalid_settings_are_reported(value: object, expected: list[str]) -> None:
    with override_settings(DJANGO_JOBS=value):
        assert ids(check_settings()) == expected


def test_connection_options_may_be_turned_off() -> None:
    off = dict.fromkeys(
        ("CONNECT_TIMEOUT", "TCP_KEEPALIVES_IDLE", "TCP_KEEPALIVES_INTERVAL", "TCP_KEEPALIVES_COUNT",
         "TCP_USER_TIMEOUT", "STATEMENT_TIMEOUT"),
    )  # fmt: skip
    with override_settings(DJANGO_JOBS=off):
        assert check_settings() == []


def test_metrics_token_and_liveness_limits_pass_when_sound() -> None:
    good = {"METRICS_TOKEN": "x" * 32, "LIVENESS_STALL_LIMIT": 12.5, "LIVENESS_OUTAGE_LIMIT": None}
    with override_settings(DJANGO_JOBS=good):
        assert check_settings() == []


def test_a_bad_metrics_token_is_not_repeated_in_the_check_message() -> None:
    with override_settings(DJANGO_JOBS={"METRICS_TOKEN": "s3cret"}):
        [message] = check_settings()
    assert "s3cret" not in message.msg and "s3cret" not in (message.hint or "")


def test_database_checks() -> None:
    assert check_database() == []
    with override_settings(DJANGO_JOBS={"DATABASE": "nope"}):
        assert ids(check_database()) == ["django_jobs.E007"]


@pytest.mark.django_db
def test_a_direct_connection_draws_no_pooler_warning() -> None:
    # PostgreSQL itself answers (tests/process/behind_pgbouncer asks a PgBouncer).
    assert check_pooling(databases=["default"]) == []
    with override_settings(DJANGO_JOBS={"LISTEN_DATABASE": "replica"}):
        assert check_pooling(databases=["default"]) == []  # the same database, directly too
    assert check_pooling(databases=None) == []  # `check` without --database asks nothing


def manage_check(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env={**os.environ, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_database_that_is_not_postgresql_is_refused(tmp_path: Path) -> None:
    result = manage_check(DATABASE_URL=f"sqlite:///{tmp_path / 'jobs.sqlite3'}")
    assert result.returncode != 0 and "django_jobs.E008" in result.stderr


def test_jobs_in_another_database_than_the_business_writes_are_a_warning() -> None:
    result = manage_check(JOBS_DATABASE_URL=os.environ.get("DATABASE_URL", DEFAULT_URL))
    assert result.returncode == 0, result.stderr
    assert "django_jobs.W001" in result.stderr + result.stdout


def test_upcasters_beyond_the_version_are_an_error() -> None:
    job("test.upcast_beyond", version=2, upcasters={1: dict, 2: dict})(lambda ctx, payload: None)
    try:
        assert ids(check_upcasters()) == ["django_jobs.E010"]
    finally:
        registry.unregister("test.upcast_beyond")


class EverythingElsewhere:
    """A project's router that sends every model, django_jobs' too, to another database."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "replica"

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "replica"


def test_routers_that_send_the_job_tables_elsewhere_are_an_error() -> None:
    with override_settings(DATABASE_ROUTERS=[f"{__name__}.EverythingElsewhere"]):
        [error] = check_database()
    assert error.id == "django_jobs.E050"
    assert "read from 'replica'" in error.msg and "would not create its tables on 'default'" in error.msg


def test_the_jobs_router_first_wins_over_a_router_of_every_model() -> None:
    routers = ["django_jobs.routers.JobsRouter", f"{__name__}.EverythingElsewhere"]
    with override_settings(DATABASE_ROUTERS=routers):
        assert check_database() == []


def test_the_jobs_router_sends_only_the_job_tables_to_the_jobs_database() -> None:
    from django.contrib.auth.models import User

    from django_jobs.models import Job, PendingLogEntry
    from django_jobs.routers import JobsRouter

    jobs_router = JobsRouter()
    with override_settings(DJANGO_JOBS={"DATABASE": "jobs"}):
        assert jobs_router.db_for_read(Job) == jobs_router.db_for_write(PendingLogEntry) == "jobs"
        assert jobs_router.db_for_read(User) is None and jobs_router.db_for_write(User) is None
        assert jobs_router.allow_migrate("jobs", "django_jobs") is True
        assert jobs_router.allow_migrate("default", "django_jobs", model_name="job") is False
        assert jobs_router.allow_migrate("default", "auth") is None


def manage_check_with(tmp_path: Path, settings_tail: str) -> subprocess.CompletedProcess[str]:
    """``manage.py check`` on the test project's settings with ``settings_tail`` run after them."""
    (tmp_path / "badsettings.py").write_text(
        "from testproject.settings import *  # noqa: F403\n" + settings_tail
    )
    pythonpath = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return manage_check(DJANGO_SETTINGS_MODULE="badsettings", PYTHONPATH=pythonpath)


def test_a_bad_setting_with_the_tasks_backend_is_a_check_message_not_a_traceback(tmp_path: Path) -> None:
    # The backend's options default to these settings: an invalid one used to raise, about a
    # TASKS option nobody set, while tasks.py was imported, hiding the other messages.
    result = manage_check_with(
        tmp_path, 'DJANGO_JOBS = {**DJANGO_JOBS, "BACKOFF_JITTER": 2, "LEASE_TIMOUT": 3}\n'
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "django_jobs.E005" in result.stderr and "django_jobs.E002" in result.stderr
    assert "TASKS" not in result.stderr  # the error is in DJANGO_JOBS, and says so


def test_every_bad_tasks_option_is_a_check_message_beside_the_other_errors(tmp_path: Path) -> None:
    tail = (
        'DJANGO_JOBS = "not a dict"\n'
        'TASKS["default"]["QUEUES"] = [*TASKS["default"]["QUEUES"], "bad queue"]\n'
        'TASKS["default"]["OPTIONS"] = {"MAX_ATTEMPTS": 0, "BACKOFF_BASE": 5, "BACKOFF_CAP": 1,'
        ' "TIMEOUT": "soon", "COLOUR": "red"}\n'
    )
    result = manage_check_with(tmp_path, tail)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "django_jobs.E001" in result.stderr
    assert result.stderr.count("django_jobs.E061") == 5, result.stderr
    for words in ("'bad queue'", "'MAX_ATTEMPTS'] must be between 1 and 1000", "cap must be >= base",
                  "'TIMEOUT'] must be a float", "unknown option(s) COLOUR"):  # fmt: skip
        assert words in result.stderr


def test_a_misconfigured_tasks_backend_refuses_to_enqueue_and_writes_nothing(db: None) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from django_jobs.models import Job
    from django_jobs.tasks_framework.backend import JobsBackend
    from testproject.testjobs import tasks

    backend = JobsBackend(
        "broken", {"BACKEND": "django_jobs.backend.JobsBackend", "OPTIONS": {"BACKOFF_JITTER": 7}}
    )
    assert [m.id for m in backend.check() if m.id == "django_jobs.E061"] == ["django_jobs.E061"]
    with pytest.raises(ImproperlyConfigured, match=r"'BACKOFF_JITTER'\] must be between 0 and 1"):
        backend.enqueue(tasks.add, (1, 2), {})
    assert not Job.objects.exists()


def test_a_sound_tasks_backend_has_no_problems() -> None:
    from django_jobs.tasks_framework.backend import JobsBackend

    options = {"MAX_ATTEMPTS": 3, "BACKOFF_BASE": 0.5, "BACKOFF_CAP": 10, "BACKOFF_JITTER": 0, "TIMEOUT": 2}
    backend = JobsBackend("sound", {"BACKEND": "django_jobs.backend.JobsBackend", "OPTIONS": options})
    assert backend.problems == []
    assert (backend.max_attempts, backend.backoff.base, backend.backoff.cap, backend.timeout) == (
        3,
        0.5,
        10.0,
        2.0,
    )
