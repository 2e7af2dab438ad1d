from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import uuid
from collections.abc import Iterator

import pytest

from django_jobs import logs
from django_jobs.decision import Happened
from django_jobs.logs import (
    JOB_FIELDS,
    MAX_JOB_IDS,
    MAX_MESSAGE_CHARS,
    JSONFormatter,
    changed_settings,
    install_console_handler,
    job_fields,
    jobs_fields,
)
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.outcomes import log_outcome, outcome_for
from django_jobs.states import JobStatus
from django_jobs.transitions import Claim


@pytest.fixture
def package_logger() -> Iterator[logging.Logger]:
    """The django_jobs logger, restored after the test. It stops propagating: the test runner
    handles the root logger; tests replace the runner's capture handlers on it."""
    logger = logging.getLogger("django_jobs")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    logger.propagate = False
    try:
        yield logger
    finally:
        logger.handlers, logger.level, logger.propagate = saved
        logging.getLogger("django_jobs.outcomes").setLevel(logging.NOTSET)


def test_a_handler_is_installed_only_where_nothing_handles_the_loggers(
    package_logger: logging.Logger,
) -> None:
    package_logger.handlers = []  # as in a project that set up no LOGGING for it
    assert install_console_handler(1) is True
    assert package_logger.level == logging.INFO and len(package_logger.handlers) == 1
    assert install_console_handler(1) is False  # now something does: nothing added
    assert len(package_logger.handlers) == 1


@pytest.mark.parametrize(
    ("verbosity", "level"), [(0, logging.WARNING), (2, logging.INFO), (3, logging.DEBUG)]
)
def test_verbosity_sets_the_level_even_with_the_projects_own_handlers(
    verbosity: int, level: int, package_logger: logging.Logger
) -> None:
    package_logger.handlers = [logging.NullHandler()]  # the project's LOGGING
    assert install_console_handler(verbosity) is False
    assert package_logger.level == level
    outcomes = logging.getLogger("django_jobs.outcomes")
    assert outcomes.isEnabledFor(logging.DEBUG) is (verbosity >= 2)


def test_json_lines_carry_time_level_logger_and_message() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "django_jobs.worker", logging.WARNING, __file__, 1, "job %s failed", ("é",), sys.exc_info()
        )
    entry = json.loads(JSONFormatter().format(record))
    assert (entry["level"], entry["logger"]) == ("WARNING", "django_jobs.worker")
    assert entry["message"] == "job é failed"
    assert entry["time"].endswith("+00:00") and "ValueError: boom" in entry["exception"]


def test_changed_settings_name_only_what_differs() -> None:
    assert changed_settings({"LEASE_TIMEOUT": 30, "POLL_INTERVAL": 1.0, "NOT_A_SETTING": 1}) == [
        "LEASE_TIMEOUT=30"
    ]


def test_changed_settings_never_show_a_credential_only_that_it_is_set() -> None:
    token = "mt-4c1d9e0b7a6f52e38d1c0b9a"
    shown = changed_settings(
        {
            "METRICS_TOKEN": token,
            "SCHEDULES": {"sync": {"type": "crm.sync", "every": 60, "payload": {"api_key": "k-77aa91f0"}}},
        }
    )
    assert shown[0] == "METRICS_TOKEN=[REDACTED]"
    assert shown[1].startswith("SCHEDULES={'sync': {'type': 'crm.sync', 'every': 60,")
    assert token not in "".join(shown) and "k-77aa91f0" not in "".join(shown)


# ---- job fields and JSON lines ------------------------------------------------------------------


def _record(
    msg: object = "job failed id=%s", args: tuple[object, ...] = (7,), **extra: object
) -> logging.LogRecord:
    logger = logging.getLogger("django_jobs.outcomes")
    return logger.makeRecord(logger.name, logging.WARNING, __file__, 1, msg, args, None, extra=extra)


def _line(record: logging.LogRecord) -> dict[str, object]:
    text = JSONFormatter().format(record)
    assert "\n" not in text  # one record, one line
    entry = json.loads(text)
    assert isinstance(entry, dict)
    return entry


def test_job_fields_never_collide_with_a_log_records_own_attributes() -> None:
    fields = job_fields(7, "test.noop", "default", 2, uuid.UUID(int=1), "host:1:abc")
    # makeRecord refuses an extra that would overwrite one of the record's attributes.
    record = _record(**fields, **jobs_fields([1, 2]))
    attributes = set(logging.LogRecord("x", logging.INFO, "", 0, "", (), None).__dict__) | {
        "message",
        "asctime",
    }
    assert not attributes & set(JOB_FIELDS)
    entry = _line(record)
    assert {k: entry[k] for k in JOB_FIELDS} == {
        "job_id": 7, "job_type": "test.noop", "job_queue": "default", "job_attempt": 2,
        "execution_id": "00000000-0000-0000-0000-000000000001", "worker_id": "host:1:abc", "job_ids": [1, 2],
    }  # fmt: skip


def test_a_line_about_many_jobs_names_a_bounded_number_of_them() -> None:
    fields = jobs_fields(iter(range(10**6)), "w")
    assert fields == {"worker_id": "w", "job_ids": list(range(MAX_JOB_IDS))}
    assert jobs_fields([]) == {"job_ids": []}


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")

    def __repr__(self) -> str:
        raise RuntimeError("no")


class _BadList(list[int]):
    def __iter__(self) -> Iterator[int]:
        raise RuntimeError("no iterating")


def test_extra_values_json_cannot_hold_are_written_as_text() -> None:
    circular: list[object] = []
    circular.append(circular)
    entry = _line(
        _record(
            obj=object(), unprintable=_Unprintable(), nan=float("nan"), huge=10**5000, ids={3},
            circular=circular, when=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), bad_list=_BadList([1]),
            nested={"k": {"password": "hunter2x"}}, api_token=12345,
        )
    )  # fmt: skip
    assert entry["obj"].startswith("<object object at")  # type: ignore[union-attr]
    assert entry["unprintable"] == "<unprintable _Unprintable: RuntimeError>"
    assert entry["nan"] == "nan" and entry["ids"] == [3]
    assert entry["huge"] == "<unprintable int: ValueError>"
    assert entry["when"] == "2026-01-01 00:00:00+00:00"
    assert entry["bad_list"] == "<unserializable _BadList: RuntimeError>"
    assert entry["nested"] == {"k": {"password": "[REDACTED]"}} and entry["api_token"] == "[REDACTED]"
    assert str(entry["circular"]).count("[") <= 6  # followed a few levels deep, then cut


def test_nul_characters_surrogates_and_a_huge_message_stay_one_valid_line() -> None:
    huge = "x" * 5_000_000
    entry = _line(_record("a\x00b \ud800 %s", (huge,), note="c\x00d"))
    message = entry["message"]
    assert isinstance(message, str) and message.startswith("a\\x00b \\ud800 x")
    assert len(message) <= MAX_MESSAGE_CHARS and "[truncated]" in message
    assert entry["note"] == "c\\x00d"


def test_a_record_whose_arguments_do_not_format_is_still_written() -> None:
    entry = _line(_record("job %s and %s", (1,)))
    assert entry["message"] == "job %s and %s (arguments not formatted: TypeError)"


def test_secrets_in_the_message_and_the_traceback_never_reach_the_line() -> None:
    try:
        raise ConnectionError(
            "could not reach postgres://app:s3cretpw@db/prod with api_key=AKIAIOSFODNN7EXAMPLE"
        )
    except ConnectionError:
        record = logging.LogRecord(
            "django_jobs.pool", logging.ERROR, __file__, 1, "executor error id=%s token=%s",
            (3, "tok-12345678"), sys.exc_info(),
        )  # fmt: skip
    line = JSONFormatter().format(record)
    entry = json.loads(line)
    for secret in ("s3cretpw", "AKIAIOSFODNN7EXAMPLE", "tok-12345678"):
        assert secret not in line
    assert "ConnectionError: could not reach postgres://app:[REDACTED]@db/prod" in entry["exception"]
    assert entry["message"] == "executor error id=3 token=[REDACTED]"


def test_a_completion_builds_no_fields_unless_debug_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # The hot path: one completion per job, logged at DEBUG. Its fields must cost nothing when
    # the line is not written.
    built: list[int] = []
    real = logs.claim_fields
    monkeypatch.setattr(
        logs, "claim_fields", lambda claim, worker_id=None: built.append(claim.id) or real(claim)
    )
    claim = Claim(
        id=9, queue="default", type="test.noop", version=1, payload="{}", attempt=1, max_attempts=5,
        execution_id=uuid.uuid4(), unique_key=None, checkpoint=None, priority=0, last_error_code=None,
        on_lost="retry", counted=True, claimed_at=0.0,
    )  # fmt: skip
    finished = Finished(claim, Happened.COMPLETED, ran_for=0.001)
    outcomes_logger = logging.getLogger("django_jobs.outcomes")
    saved = outcomes_logger.level
    try:
        outcomes_logger.setLevel(logging.INFO)
        outcome = outcome_for(finished)
        assert outcome.status == JobStatus.COMPLETED
        log_outcome(finished, outcome)
        assert built == []
        outcomes_logger.setLevel(logging.DEBUG)
        log_outcome(finished, outcome)
        assert built == [9]
    finally:
        outcomes_logger.setLevel(saved)
