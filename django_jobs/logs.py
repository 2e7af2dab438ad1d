"""What a worker says when the project set up no logging for it.

Django's default ``LOGGING`` routes its own loggers only: without this, ``runjobs`` would be
silent but for warnings escaping through Python's last-resort handler. When nothing handles the
``django_jobs`` loggers, ``runjobs`` gives them one line-per-record handler on stderr, at the
level its ``-v`` asks for. A project that configures them (see docs/workers.md) keeps its own.

The loggers, all under ``django_jobs``:

``django_jobs.worker``    start (queues, concurrency, types, settings), a summary every minute
                          while busy, why it stops, outages of the database, give-backs
``django_jobs.outcomes``  each retry scheduled, each failure and park (one line, ids and codes);
                          at ``-v 2`` each completion too
``django_jobs.reaper``    each job recovered from a lost worker, retention prunes
``django_jobs.executor``  leases lost, connections lost mid-job, reconciliations
``django_jobs.heartbeat`` beats that could not be written
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

from django_jobs.conf import DEFAULTS

PACKAGE = "django_jobs"
FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

#: runjobs' -v: 0 warnings and errors only, 1 what the worker does (the default), 2 also every
#: completed job, 3 everything (debug).
VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.INFO, 3: logging.DEBUG}


def install_console_handler(verbosity: int = 1) -> bool:
    """Give the ``django_jobs`` loggers a stderr handler unless the project routes them already.

    Returns whether it installed one. An explicit ``-v`` other than 1 sets the loggers' level
    either way: asking for quiet or for detail should work with any ``LOGGING``.
    """
    package = logging.getLogger(PACKAGE)
    level = VERBOSITY_LEVELS[max(0, min(verbosity, 3))]
    installed = False
    if not package.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        package.addHandler(handler)
        package.setLevel(level)
        installed = True
    elif verbosity != 1:
        package.setLevel(level)
    if verbosity >= 2:
        logging.getLogger(f"{PACKAGE}.outcomes").setLevel(logging.DEBUG)
    return installed


def changed_settings(user: dict[str, Any]) -> list[str]:
    """``KEY=value`` for each setting the project set to something else than its default."""
    return [f"{key}={user[key]!r}" for key in sorted(user) if key in DEFAULTS and user[key] != DEFAULTS[key]]


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any).

    ``"formatters": {"json": {"()": "django_jobs.logs.JSONFormatter"}}`` in ``LOGGING``.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
