from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_jobs.checks import check_database, check_settings


def ids(messages: list[Any]) -> list[str]:
    return [m.id for m in messages]


def test_default_settings_pass() -> None:
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
        ({"SENSITIVE_PAYLOAD_KEYS": "token"}, ["django_jobs.E011"]),  # a string, not a list of them
        ({"SENSITIVE_PAYLOAD_KEYS": ["card", "(unclosed"]}, ["django_jobs.E011"]),
        ({"SENSITIVE_PAYLOAD_KEYS": [3]}, ["django_jobs.E011"]),
    ],
)
def test_invalid_settings_are_reported(value: object, expected: list[str]) -> None:
    with override_settings(DJANGO_JOBS=value):
        assert ids(check_settings()) == expected


def test_database_checks() -> None:
    assert check_database() == []
    with override_settings(DJANGO_JOBS={"DATABASE": "nope"}):
        assert ids(check_database()) == ["django_jobs.E007"]
