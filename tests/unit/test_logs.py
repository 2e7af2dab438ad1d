from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from django_jobs.logs import JSONFormatter, changed_settings, install_console_handler


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
