"""The types of the management commands' arguments: each parses one value from the command
line, or raises ``argparse.ArgumentTypeError`` with what is wrong with it (argparse shows it
with the option's name and exits with status 2, before anything runs)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from django_jobs.conf import jobs_settings
from django_jobs.errors import undeclared_queue
from django_jobs.names import MAX_JOB_ID, QUEUE_RE

#: Each execution slot holds a database connection (and a thread or a process) for the life of
#: the worker; PostgreSQL's max_connections is 100 by default. More throughput comes from more
#: worker processes, on more machines, not from one worker with thousands of slots.
MAX_CONCURRENCY = 256


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be >= 1")
    return number


def job_id(value: str) -> int:
    """A job's id: a positive integer that fits the id column (bigint)."""
    number = positive_int(value)
    if number > MAX_JOB_ID:
        raise argparse.ArgumentTypeError(f"{value!r} is not a job id (at most {MAX_JOB_ID})")
    return number


def concurrency(value: str) -> int:
    number = positive_int(value)
    if number > MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"{value} is more than {MAX_CONCURRENCY}: each slot holds its own database connection "
            "(PostgreSQL allows 100 by default); run more workers instead"
        )
    return number


def non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be >= 0")
    return number


def port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (0 to 65535; 0 picks a free one)")
    return number


def queue_name(value: str) -> tuple[str, int | None]:
    """``NAME``, or ``NAME=SLOTS``: the queue gets that many execution slots of its own. Once
    ``DJANGO_JOBS["QUEUES"]`` is declared, ``NAME`` must be one of them: ``enqueue()`` refuses
    any other, so a worker serving a misspelt queue would wait forever for jobs never written."""
    name, has_slots, slots = value.partition("=")
    if not QUEUE_RE.match(name):
        raise argparse.ArgumentTypeError(f"{name!r} is not a valid queue name")
    declared = jobs_settings.QUEUES
    if declared is not None and name not in declared:
        raise argparse.ArgumentTypeError(undeclared_queue(name, declared))
    if not has_slots:
        return name, None
    try:
        return name, concurrency(slots)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"slots of queue {name!r}: {exc}") from None


def queue(value: str) -> str:
    """One queue's name (no ``=SLOTS``)."""
    if not QUEUE_RE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid queue name")
    return value


def matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """A value ``pattern`` matches whole; ``what`` names it in the refusal ("an error code")."""

    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return text

    return parse


def seconds_between(low: float, high: float) -> Callable[[str], float]:
    """A number of seconds from ``low`` to ``high``, both included."""

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{value!r} must be between {low:g} and {high:g} seconds")
        return number

    return parse


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An integer from ``low`` to ``high``, both included."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{value!r} must be between {low} and {high}")
        return number

    return parse
