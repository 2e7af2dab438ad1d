from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_jobs import job
from django_jobs.checks import check_database, check_settings, check_upcasters
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
        ({"CHECK_OLDEST_DUE_WARNING": 0}, ["django_jobs.E040"]),
        ({"CHECK_OLDEST_DUE_CRITICAL": "30m"}, ["django_jobs.E040"]),
        ({"CHECK_STALE_REAPER_INTERVALS": float("inf")}, ["django_jobs.E040"]),
        ({"CHECK_OLDEST_DUE_WARNING": 600, "CHECK_OLDEST_DUE_CRITICAL": 60}, ["django_jobs.E041"]),
        ({"CHECK_OLDEST_DUE_WARNING": 1800}, ["django_jobs.E041"]),  # equal to the default critical
        ({"SENSITIVE_PAYLOAD_KEYS": "token"}, ["django_jobs.E011"]),  # a string, not a list of them
        ({"SENSITIVE_PAYLOAD_KEYS": ["card", "(unclosed"]}, ["django_jobs.E011"]),
        ({"SENSITIVE_PAYLOAD_KEYS": [3]}, ["django_jobs.E011"]),
        ({"METRICS_TOKEN": "short"}, ["django_jobs.E030"]),  # guessable
        ({"METRICS_TOKEN": " " * 20}, ["django_jobs.E030"]),
        ({"METRICS_TOKEN": 1234567890123456789}, ["django_jobs.E030"]),
        ({"LIVENESS_STALL_LIMIT": 0}, ["django_jobs.E031"]),
        ({"LIVENESS_OUTAGE_LIMIT": "60"}, ["django_jobs.E031"]),
        ({"LIVENESS_STUCK_LIMIT": float("inf")}, ["django_jobs.E031"]),
        ({"TCP_USER_TIMEOUT": 0}, ["django_jobs.E050"]),  # libpq would read it as "off"
        ({"STATEMENT_TIMEOUT": "30s"}, ["django_jobs.E050"]),
        ({"CONNECT_TIMEOUT": -1}, ["django_jobs.E050"]),
        ({"TCP_KEEPALIVES_COUNT": 2.5}, ["django_jobs.E051"]),
        ({"TCP_KEEPALIVES_COUNT": True}, ["django_jobs.E051"]),
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
