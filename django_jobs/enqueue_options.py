"""What an enqueue call asks for, checked: the job type, the options its jobs share, and each
payload with its keys. Nothing here writes; ``django_jobs.enqueueing`` inserts what passed.

Every check raises an :class:`~django_jobs.errors.EnqueueError` (a ``ValueError``) that says
what was wrong, before anything is written.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django.conf import settings
from django.utils import timezone

from django_jobs.conf import jobs_settings
from django_jobs.errors import (
    InvalidOption,
    InvalidPayload,
    PayloadTooLarge,
    UnknownJobType,
    UnknownQueue,
    undeclared_queue,
)
from django_jobs.jsonvalues import encode, plain_json_problem
from django_jobs.limits import concurrency_key_problem
from django_jobs.names import PRIORITY_RANGE, QUEUE_RE
from django_jobs.registry import JobType, registry

TypeRef = str | Callable[..., Any]
UniqueKey = str | Callable[[dict[str, Any]], str | None] | None
ConcurrencyKey = UniqueKey

_MAX_UNIQUE_KEY = 200


@dataclass(frozen=True, slots=True)
class Options:
    """What every job of one call shares, checked."""

    queue: str
    type: str
    version: int
    priority: int
    run_at: dt.datetime | None
    delay: float
    max_attempts: int
    on_lost: str
    concurrency_limit: int
    on_lost_in_call: str | None
    #: The enqueue span's context as JSON text, when the call is traced (``observe.tracing``).
    trace_context: str | None = None
    # The producer's controls (``enqueue_controls``), None when the call uses none.
    #: Seconds a unique key stays taken after its job was created or ended.
    unique_for: float | None = None
    #: The start-by deadline: a datetime, or seconds from the database's now().
    start_by: dt.datetime | None = None
    expires_in: float | None = None
    #: The debounce window (seconds), its key, and whether a later enqueue's payload replaces
    #: the pending job's.
    debounce: float | None = None
    debounce_key: str | None = None
    debounce_replace: bool = True

    @property
    def controlled(self) -> bool:
        """Whether the jobs are written with a deadline or a debounce key (the INSERT's variant)."""
        return self.start_by is not None or self.expires_in is not None or self.debounce_key is not None

    def statement_params(self) -> dict[str, Any]:
        """The INSERT's parameters every job of the call shares (``transitions.enqueue``)."""
        if self.controlled:
            return {
                **self._plain_params(),
                "start_by": self.start_by,
                "expires_in": self.expires_in,
                "debounce_key": self.debounce_key,
            }
        return self._plain_params()

    def _plain_params(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "type": self.type,
            "version": self.version,
            "priority": self.priority,
            "run_at": self.run_at,
            "delay": self.delay,
            "max_attempts": self.max_attempts,
            "on_lost": self.on_lost,
            "concurrency_limit": self.concurrency_limit,
            "on_lost_in_call": self.on_lost_in_call,
            "trace_context": self.trace_context,
        }


class Item(NamedTuple):
    """One job of a call: its payload and keys, checked (a tuple: a call may make 100,000)."""

    payload: dict[str, Any]
    encoded: str  # the payload as JSON text, validated
    unique_key: str | None
    concurrency_key: str | None


def resolve_type(type_or_handler: TypeRef) -> JobType:
    """The registered job type named, or whose ``@job`` handler is given."""
    name = type_or_handler if isinstance(type_or_handler, str) else getattr(type_or_handler, "job_name", None)
    if name is None:
        raise UnknownJobType(f"{type_or_handler!r} is not a job type name nor a @job handler")
    job_type = registry.get(name)
    if job_type is None:
        known = ", ".join(registry.names()) or "none"
        raise UnknownJobType(f"unknown job type {name!r} (registered: {known})")
    return job_type


def validate_options(
    job_type: JobType,
    queue: str | None,
    priority: int | None,
    run_at: dt.datetime | None,
    delay: float | dt.timedelta | None,
    max_attempts: int | None,
) -> Options:
    queue = job_type.default_queue if queue is None else queue
    if not isinstance(queue, str) or not QUEUE_RE.match(queue):
        raise InvalidOption(f"invalid queue {queue!r}: 1-100 letters, digits and _ . : -")
    declared = jobs_settings.QUEUES
    if declared is not None and queue not in declared:
        raise UnknownQueue(undeclared_queue(queue, declared) + "; nothing was enqueued")
    priority = job_type.priority if priority is None else priority
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITY_RANGE:
        raise InvalidOption(f"invalid priority {priority!r}: an integer between -100 and 100")
    max_attempts = job_type.default_max_attempts if max_attempts is None else max_attempts
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000:
        raise InvalidOption(f"invalid max_attempts {max_attempts!r}: an integer between 1 and 1000")
    if run_at is not None and delay is not None:
        raise InvalidOption("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, dt.datetime):
            raise InvalidOption(f"run_at must be a datetime, not {type(run_at).__name__}")
        if timezone.is_naive(run_at):
            if settings.USE_TZ:
                raise InvalidOption("run_at must be timezone-aware (USE_TZ is on)")
            run_at = timezone.make_aware(run_at)
    seconds = 0.0
    if delay is not None:
        if isinstance(delay, dt.timedelta):
            seconds = delay.total_seconds()
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            seconds = float(delay)
        else:
            raise InvalidOption(f"delay must be seconds or a timedelta, not {type(delay).__name__}")
        if not math.isfinite(seconds) or seconds < 0:
            raise InvalidOption(f"delay must be a finite number of seconds >= 0, not {delay!r}")
    return Options(
        queue,
        job_type.name,
        job_type.version,
        priority,
        run_at,
        seconds,
        max_attempts,
        job_type.on_lost,
        job_type.concurrency_limit,
        job_type.on_lost_in_call,
    )


def validate_unique_key(key: object) -> None:
    if key is None:
        return
    if not isinstance(key, str) or not key or len(key) > _MAX_UNIQUE_KEY:
        raise InvalidOption(f"unique_key must be a non-empty string of at most {_MAX_UNIQUE_KEY} characters")


def encode_payload(payload: object, limit: int | None = None) -> str:
    """Encode a payload as JSON after checking it round-trips unchanged through jsonb.

    Raises ``InvalidPayload`` for anything but a dict of plain JSON values (str keys; no
    tuples, sets, dates, NaN or NUL characters) and ``PayloadTooLarge`` past the size limit.
    """
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a dict (a JSON object), not {type(payload).__name__}")
    problem = plain_json_problem(payload, "payload")
    if problem is not None:
        raise InvalidPayload(problem)
    encoded = encode(payload)
    if limit is None:
        limit = jobs_settings.MAX_PAYLOAD_BYTES
    # A character is at most 4 bytes in UTF-8: most payloads are clear of the limit uncounted.
    if len(encoded) * 4 > limit and (size := len(encoded.encode())) > limit:
        raise PayloadTooLarge(f"payload is {size} bytes encoded, over the limit of {limit} bytes")
    return encoded


def validate_items(
    job_type: JobType,
    payloads: Iterable[dict[str, Any]],
    unique_key: UniqueKey,
    concurrency_key: ConcurrencyKey,
) -> list[Item]:
    """Each payload, encoded, with its unique and concurrency keys (a key may be a function of
    the payload; the concurrency key defaults to the type's). Raises for the first bad one, with
    its index when there are several."""
    items: list[Item] = []
    key_of = concurrency_key if concurrency_key is not None else job_type.concurrency_key
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    keyed = unique_key is not None or key_of is not None
    for index, payload in enumerate(payloads):
        try:
            encoded = encode_payload(payload, limit)
            if not keyed:  # most calls: nothing more to check per job
                items.append(Item(payload, encoded, None, None))
                continue
            key = unique_key(payload) if callable(unique_key) else unique_key
            validate_unique_key(key)
            concurrency = key_of(payload) if callable(key_of) else key_of
            problem = concurrency_key_problem(concurrency)
            if problem is not None:
                raise InvalidOption(problem)
        except (InvalidPayload, InvalidOption) as exc:
            if index == 0 and isinstance(payloads, Sequence) and len(payloads) == 1:
                raise
            raise type(exc)(f"payload #{index}: {exc}") from exc
        items.append(Item(payload, encoded, key, concurrency))
    return items
