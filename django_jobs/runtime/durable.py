"""The durable part of ``JobContext``: ``ctx.step``, ``ctx.external_step``, ``ctx.sleep`` and
``ctx.wait_for`` (docs/durable-jobs.md).

A durable handler is replayed from the top on every execution. Each of these calls takes the
next position of the job (1, 2, 3, …) and reads what an earlier execution recorded there: a
step's result is returned without running it again, a sleep that is over and a wait that got
its signal are passed. The first position not yet recorded is where the work goes on. A
position recorded under another name or kind means that the replay left the recorded path: a
``ReplayMismatch``, never a guess.

A sleep, or a wait with no signal yet, ends the execution: :class:`Suspended` unwinds the
handler (a ``BaseException``, so that an ``except Exception`` in the handler does not swallow
it), and the executor reports it; the outcome writer makes the job ``pending``, due at the
wake time or the timeout, without counting an attempt.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import IntegrityError, transaction

from django_jobs.conf import jobs_settings
from django_jobs.durable_rules import (
    InvalidStep,
    ReplayMismatch,
    SignalTimeout,
    check_name,
    duration,
    sleep_seconds,
    step_json,
)
from django_jobs.runtime.handler_connections import jobs_wrapper
from django_jobs.transitions import durable as records

T = TypeVar("T")


class Suspended(BaseException):
    """Ends an execution that sleeps or waits for a signal; raised by ``ctx.sleep`` and
    ``ctx.wait_for``, caught by the executor. A handler must let it through."""

    def __init__(self, delay: float, details: dict[str, Any], signal: str | None = None) -> None:
        super().__init__(f"suspended for {delay:.3f}s")
        #: Seconds from the database's now() until the job is due again.
        self.delay = max(0.0, delay)
        #: What the job's event records: where it sleeps or waits.
        self.details = details
        #: The signal a wait waits for (None for a sleep).
        self.signal = signal


class DurableSteps:
    """Mixed into ``JobContext``: the calls of a durable handler. Reads its job's records once
    per execution, at the first call."""

    job_id: int
    type: str
    execution_id: uuid.UUID
    #: The jobs connection's transaction state when the handler began (see _not_in_a_transaction).
    _atomic_at_start: tuple[bool, int] = (False, 0)
    _records: list[records.Recorded] | None = None
    _position: int = 0
    _names: set[str]

    # ---- the path ---------------------------------------------------------------------------

    def _next(self, name: str, kind: str) -> records.Recorded | None:
        """Take the next position for ``name`` of ``kind``; what was recorded there, or None."""
        if self._records is None:
            self._records = records.recorded(self.job_id)
            self._names = set()
        if name in self._names:
            raise InvalidStep(
                f"job {self.job_id}: {name!r} is met twice in one run of the handler; give each step, "
                "sleep and wait of a job its own name. Nothing was written"
            )
        self._names.add(name)
        self._position += 1
        position = self._position
        found = next((r for r in self._records if r.sequence == position), None)
        if found is not None and (found.name != name or found.kind != kind):
            raise ReplayMismatch(
                f"job {self.job_id}: position {position} is {kind} {name!r} in this run, but an earlier "
                f"execution recorded {found.kind} {found.name!r} there: a replay must meet its steps, "
                "sleeps and waits in the same order (docs/durable-jobs.md)"
            )
        if found is None and any(r.name == name for r in self._records):
            raise ReplayMismatch(
                f"job {self.job_id}: {name!r} is met at position {position}, but an earlier execution "
                "recorded it elsewhere: a replay must meet its steps in the same order"
            )
        return found

    # ---- steps ------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once for this job and return its result (plain JSON).

        The first execution that reaches the step runs it inside ``transaction.atomic()`` on
        the jobs database and records its result in the same transaction: the step's own
        writes there commit with the record, or neither does. Every later execution (a retry,
        a recovery after a crash, a resume after a sleep) gets the recorded result back without
        calling ``fn``. What is returned is the result as stored (JSON round-tripped: a tuple
        comes back a list), the same on the first run as on replays.

        Raises ``InvalidStep`` for a bad or repeated name or a result that is not plain JSON
        (the step's writes roll back), ``ReplayMismatch`` when an earlier execution recorded
        another step at this position, ``LeaseLost`` when the job is no longer this
        execution's (the step's writes roll back).
        """
        check_name(name, "step")
        found = self._next(name, "step")
        if found is not None:
            return _decoded(found.result)  # type: ignore[no-any-return]
        self.raise_if_cancelled()
        with transaction.atomic(using=jobs_settings.DATABASE):
            value = fn(*args, **kwargs)
            encoded = step_json(value, name)
            self._record_step(name, encoded)
        return _decoded(encoded)  # type: ignore[no-any-return]

    def step_key(self, name: str) -> str:
        """The idempotency key of step ``name`` of this job: the same on every execution, for
        the provider's ``Idempotency-Key`` header of an :meth:`external_step`."""
        check_name(name, "step")
        return self.idempotency_key("step", name)

    def external_step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """A step that calls out of the system (a charge, an e-mail): run once, its result recorded.

        ``name`` must be one of the type's ``@job(external_calls=...)``: the call is made inside
        ``ctx.external_call(name)``, whose mark is committed before ``fn`` runs. Give ``fn`` the
        step's stable key, ``ctx.step_key(name)``, for the provider to deduplicate by. The
        result is recorded once ``fn`` returned, in a transaction of its own; an execution lost
        between the call and the record is reconciled or parked as the type's policy says
        (``on_lost_in_call``), never blindly repeated. Raises as :meth:`step`, and
        ``ValueError`` for an undeclared call name.
        """
        check_name(name, "step")
        found = self._next(name, "step")
        if found is not None:
            return _decoded(found.result)  # type: ignore[no-any-return]
        self.raise_if_cancelled()
        with self.external_call(name):
            value = fn(*args, **kwargs)
        encoded = step_json(value, name)
        with transaction.atomic(using=jobs_settings.DATABASE):
            self._record_step(name, encoded)
        return _decoded(encoded)  # type: ignore[no-any-return]

    def _record_step(self, name: str, encoded: str) -> None:
        try:
            with transaction.atomic(using=jobs_settings.DATABASE):
                written = records.record(
                    self.job_id, self.execution_id, self._position, name, "step", result=encoded
                )
        except IntegrityError as exc:
            raise ReplayMismatch(
                f"job {self.job_id}: step {name!r} (position {self._position}) was recorded meanwhile by "
                "another execution"
            ) from exc
        if written is None:
            raise self._lost()

    # ---- sleeps -----------------------------------------------------------------------------

    def sleep(
        self,
        seconds: float | dt.timedelta | None = None,
        *,
        until: dt.datetime | None = None,
        name: str | None = None,
    ) -> None:
        """Sleep ``seconds`` (0 to a year), or until the aware datetime ``until``, durably.

        The first time, the wake time is recorded (by the database's clock) and the execution
        ends: its slot and lease are freed at once, and the job is ``pending``, due at the wake
        time, without using an attempt. The next execution replays to here and goes on. A sleep
        has a name of its own (``name``, by default ``sleep#<position>``), like a step.

        Raises ``InvalidStep`` for a negative, infinite or absurd duration, or a naive
        ``until`` (nothing written), and as :meth:`step`.
        """
        if isinstance(seconds, dt.timedelta):
            seconds = duration(seconds, "sleep")
        how_long, wake_at = sleep_seconds(seconds, until)
        self._not_in_a_transaction("ctx.sleep()")
        label = check_name(name if name is not None else f"sleep#{self._position + 1}", "sleep")
        found = self._next(label, "sleep")
        if found is not None:
            left, until_at = found.left or 0.0, found.until
        else:
            try:
                with transaction.atomic(using=jobs_settings.DATABASE):
                    written = records.record(
                        self.job_id, self.execution_id, self._position, label, "sleep",
                        seconds=how_long, until=wake_at,
                    )  # fmt: skip
            except IntegrityError as exc:
                raise ReplayMismatch(f"job {self.job_id}: sleep {label!r} was recorded meanwhile") from exc
            if written is None:
                raise self._lost()
            until_at, left_or_none = written
            left = left_or_none or 0.0
        if left > 0:
            raise Suspended(left, {"sleep": label, "until": until_at.isoformat() if until_at else None})

    def _not_in_a_transaction(self, what: str) -> None:
        """Refuse a sleep or wait inside a transaction the handler opened: ending the execution
        rolls it back, and with it the steps recorded in it and the sleep's own record, so the
        replay would run them again and sleep again, for ever."""
        if atomic_depth() != self._atomic_at_start:
            raise InvalidStep(
                f"{what} inside transaction.atomic(): it ends the execution, which would roll back the "
                "steps recorded in that transaction; sleep or wait outside it. Nothing was written"
            )

    # ---- signals ----------------------------------------------------------------------------

    def wait_for(self, name: str, *, timeout: float | dt.timedelta) -> Any:
        """Wait for signal ``name`` (``django_jobs.signal(key, name, data)``) and return its data.

        A signal sent before the wait began is kept and returned at once. Without one, the wait
        is recorded with its timeout (by the database's clock) and the execution ends: the job
        is ``pending``, due at the timeout, until the signal makes it due at once. The next
        execution replays to here and gets the data. A job waits for one signal of a name once.

        ``timeout`` (seconds, more than 0 up to a year) is required: a wait that can last for
        ever is a job nobody notices. Raises ``SignalTimeout`` when it passed with no signal
        (on every replay too: catch it to decide), ``InvalidStep`` for a bad name or timeout
        (nothing written), and as :meth:`step`.
        """
        check_name(name, "signal")
        self._not_in_a_transaction("ctx.wait_for()")
        limit = duration(timeout, "wait's timeout")
        if limit <= 0:
            raise InvalidStep("a wait's timeout must be more than 0 seconds; nothing was written")
        found = self._next(name, "wait")
        if found is not None and found.ended:
            if found.timed_out:
                raise SignalTimeout(f"no signal {name!r} came for job {self.job_id} before its timeout")
            return _decoded(found.result)
        wait = records.take_signal(
            self.job_id, self.execution_id, self._position, name, limit, started=found is not None
        )
        if wait is None:
            raise self._lost()
        if wait.delivered:
            return _decoded(wait.data)
        if wait.timed_out:
            raise SignalTimeout(f"no signal {name!r} came for job {self.job_id} before its timeout")
        details = {"signal": name, "times_out_at": wait.until.isoformat()}
        raise Suspended(wait.left, details, signal=name)

    if TYPE_CHECKING:  # JobContext's own

        def idempotency_key(self, *parts: object, anchor: str | None = None) -> str: ...
        def external_call(self, name: str) -> AbstractContextManager[None]: ...
        def raise_if_cancelled(self) -> None: ...
        def _lost(self) -> BaseException: ...


def atomic_depth() -> tuple[bool, int]:
    """Whether the jobs connection is in a transaction, and how many savepoints deep."""
    connection = jobs_wrapper()
    return connection.in_atomic_block, len(connection.savepoint_ids)


def _decoded(text: str | None) -> Any:
    return None if text is None else json.loads(text)
