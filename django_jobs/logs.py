"""How the package logs: the fields that name a job on each line, a JSON formatter, and what a
worker says when the project set up no logging for it.

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
``django_jobs.pool``      stuck jobs, child processes that died or were killed
``django_jobs.scheduler`` schedule ticks fired, missed or failed
``django_jobs.signals``   receivers that raised

Every line about one job also carries the job as fields of its record (``extra``), named so
that they cannot collide with ``logging.LogRecord``'s own attributes: ``job_id``, ``job_type``,
``job_queue``, ``job_attempt``, ``execution_id``, and ``worker_id`` where the worker running
the execution is known. A line about several jobs at once (prefetched jobs given back, jobs left
to their leases at shutdown, a batch of outcomes refused) carries ``job_ids``, a list of at most
``MAX_JOB_IDS`` ids; a line that sums up a pass (a retention prune) names no job and carries
none. Lines about the worker itself carry ``worker_id``. :class:`JSONFormatter` writes them.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import math
import sys
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from django_jobs.conf import CREDENTIAL_SETTINGS, DEFAULTS
from django_jobs.sanitize import REDACTED, is_secret_name, sanitize, storable_text

if TYPE_CHECKING:
    from django_jobs.runtime.lease import Lease

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
    """``KEY=value`` for each setting the project set to something else than its default.

    The value of a setting that holds a credential (``CREDENTIAL_SETTINGS``, or one named like a
    secret) is never shown, only that it is set; any other value is shown sanitized, as a stored
    error is (a schedule's payload may carry an API key). The text is safe before it reaches a
    formatter, so no formatter can print a secret from it.
    """
    return [
        f"{key}={_shown_setting(key, user[key])}"
        for key in sorted(user)
        if key in DEFAULTS and user[key] != DEFAULTS[key]
    ]


def _shown_setting(key: str, value: Any) -> str:
    if key in CREDENTIAL_SETTINGS or is_secret_name(key):
        return REDACTED
    return sanitize(repr(value))


class Execution(Protocol):
    """What the fields of one execution are read from (a ``Claim`` is one)."""

    @property
    def id(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def execution_id(self) -> uuid.UUID: ...


#: The record attributes that say which job(s) a line is about (see the module's docstring).
JOB_FIELDS = ("job_id", "job_type", "job_queue", "job_attempt", "execution_id", "worker_id", "job_ids")
#: A line about many jobs names this many of them at most: a line must stay a line.
MAX_JOB_IDS = 100


def job_fields(
    job_id: int,
    job_type: str,
    queue: str | None,
    attempt: int | None,
    execution_id: uuid.UUID | str | None,
    worker_id: str | None = None,
) -> dict[str, Any]:
    """The ``extra`` of a log line about one execution of one job.

    The execution id is a string (JSON has no UUID); ``worker_id`` is left out when unknown.
    Build it only for a line that will be emitted: on a hot path, check
    ``logger.isEnabledFor(level)`` first.
    """
    fields: dict[str, Any] = {
        "job_id": job_id,
        "job_type": job_type,
        "job_queue": queue,
        "job_attempt": attempt,
        "execution_id": None if execution_id is None else str(execution_id),
    }
    if worker_id is not None:
        fields["worker_id"] = worker_id
    return fields


def claim_fields(claim: Execution, worker_id: str | None = None) -> dict[str, Any]:
    """:func:`job_fields` of a claimed execution."""
    return job_fields(claim.id, claim.type, claim.queue, claim.attempt, claim.execution_id, worker_id)


def lease_fields(lease: Lease) -> dict[str, Any]:
    """:func:`job_fields` of the execution holding ``lease`` (ids only if it knows no claim)."""
    if lease.claim is not None:
        return claim_fields(lease.claim, lease.worker_id)
    return job_fields(lease.job_id, "", None, None, lease.execution_id, lease.worker_id)


def jobs_fields(job_ids: Iterable[int], worker_id: str | None = None) -> dict[str, Any]:
    """The ``extra`` of a log line about several jobs: the first ``MAX_JOB_IDS`` of their ids."""
    ids: list[int] = []
    for job_id in job_ids:
        if len(ids) == MAX_JOB_IDS:
            break
        ids.append(job_id)
    return worker_fields(worker_id) | {"job_ids": ids}


def worker_fields(worker_id: str | None) -> dict[str, Any]:
    """The ``extra`` of a log line about a worker (empty when the worker is not known)."""
    return {} if worker_id is None else {"worker_id": worker_id}


#: The attributes every LogRecord has: anything else on a record came from ``extra``.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}
#: Longest message and exception text written (as for a stored error: head and tail kept).
MAX_MESSAGE_CHARS = 16_000
MAX_EXCEPTION_CHARS = 16_000
#: Longest text of one extra value, and how deep and long a nested extra value is followed.
MAX_EXTRA_CHARS = 2_000
_MAX_DEPTH, _MAX_ITEMS = 4, MAX_JOB_IDS


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    the job fields and any other ``extra`` of the record, and ``exception`` when there is one.

    ``"formatters": {"json": {"()": "django_jobs.logs.JSONFormatter"}}`` in ``LOGGING``.

    Texts are made safe as stored errors are (``sanitize.storable_text``): secrets redacted,
    NUL characters escaped, lone surrogates replaced, long texts cut to their head and tail.
    The value of an extra (or of a key inside one) named like a secret is redacted whole. An
    extra value JSON cannot write is written as its sanitized ``str()``; formatting never
    raises for what a record carries.
    """

    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception as exc:  # a bad %-format or an argument whose __str__ raises
            message = (
                f"{_text(record.msg, MAX_MESSAGE_CHARS)} (arguments not formatted: {type(exc).__name__})"
            )
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": _text(record.name, MAX_EXTRA_CHARS),
            "message": _text(message, MAX_MESSAGE_CHARS),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in entry:
                entry[_text(key, 200)] = REDACTED if is_secret_name(key) else _safely_jsonable(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = _text(record.exc_text, MAX_EXCEPTION_CHARS)
        if record.stack_info:
            entry["stack"] = _text(self.formatStack(record.stack_info), MAX_EXCEPTION_CHARS)
        return json.dumps(entry, ensure_ascii=False, allow_nan=False)


def _text(value: object, limit: int) -> str:
    return storable_text(value, limit)


def _safely_jsonable(value: object) -> Any:
    try:
        return _jsonable(value, _MAX_DEPTH)
    except Exception as exc:  # a container whose iteration raises is input too
        return f"<unserializable {_text(type(value).__name__, 200)}: {type(exc).__name__}>"


def _jsonable(value: object, depth: int) -> Any:
    """``value`` as plain JSON values: safe texts, finite numbers, bounded lists and objects."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        # Past 4300 digits, Python refuses to turn an int into text at all.
        return int(value) if abs(value) < 10**18 else _text(value, MAX_EXTRA_CHARS)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else str(value)  # JSON has no NaN
    if isinstance(value, str):
        return _text(value, MAX_EXTRA_CHARS)
    if depth > 0 and isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(item, depth - 1) for item in itertools.islice(value, _MAX_ITEMS)]
    if depth > 0 and isinstance(value, dict):
        return {
            _text(k, 200): REDACTED if is_secret_name(str(k)) else _jsonable(v, depth - 1)
            for k, v in itertools.islice(value.items(), _MAX_ITEMS)
        }
    return _text(value, MAX_EXTRA_CHARS)  # str() of anything else, even one that raises
