"""``JobContext``: what a handler knows about the execution it runs in, and what it may do."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from typing import Any

from django_jobs import transitions


class LeaseLost(Exception):
    """This execution no longer owns its job (it was recovered and handed to another worker).

    Raised by the context's writes; the handler should let it propagate. Its outcome will not
    be written: the job's state belongs to the new owner.
    """


class JobContext:
    """Passed to every handler as its first argument.

    ``attempt`` counts claims, this one included (1 on the first run). ``deadline`` is the
    wall-clock time after which the execution is treated as timed out, or ``None``; give the
    handler's blocking calls timeouts derived from :meth:`time_left`.
    """

    __slots__ = (
        "_deadline_monotonic",
        "attempt",
        "checkpoint",
        "deadline",
        "execution_id",
        "job_id",
        "max_attempts",
        "queue",
        "type",
        "unique_key",
    )

    def __init__(
        self,
        *,
        job_id: int,
        type: str,
        queue: str,
        attempt: int,
        max_attempts: int,
        execution_id: uuid.UUID,
        unique_key: str | None = None,
        checkpoint: Any = None,
        timeout: float | None = None,
    ) -> None:
        self.job_id = job_id
        self.type = type
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.execution_id = execution_id
        self.unique_key = unique_key
        #: The last checkpoint saved by an earlier execution of this job, or None.
        self.checkpoint = checkpoint
        if timeout is None:
            self.deadline: dt.datetime | None = None
            self._deadline_monotonic: float | None = None
        else:
            self.deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=timeout)
            self._deadline_monotonic = time.monotonic() + timeout

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def time_left(self) -> float | None:
        """Seconds until the deadline (never negative), or None without a deadline."""
        if self._deadline_monotonic is None:
            return None
        return max(0.0, self._deadline_monotonic - time.monotonic())

    def idempotency_key(self, *parts: object) -> str:
        """A key that is the same for every attempt of this job, e.g. for an Idempotency-Key header.

        Built from the job type, the job's unique key (or its id) and ``parts``; never from the
        attempt or the execution, which change on every retry.
        """
        anchor = self.unique_key if self.unique_key is not None else f"job-{self.job_id}"
        return ":".join([self.type, anchor, *(str(p) for p in parts)])

    def progress(self, done: int | float, total: int | float | None = None) -> None:
        """Record progress, visible to operators. Raises ``LeaseLost`` if the job is no longer ours."""
        value = {"done": done, "total": total}
        if not transitions.set_progress(self.job_id, self.execution_id, json.dumps(value)):
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")

    def save_checkpoint(self, data: Any) -> None:
        """Durably store ``data``; a retry of this job starts with it in ``ctx.checkpoint``.

        Save a checkpoint only after the work it stands for is itself durable (committed), or
        a retry would skip work that never happened. Raises ``LeaseLost`` if the job is no
        longer ours.
        """
        if not transitions.set_checkpoint(self.job_id, self.execution_id, json.dumps(data)):
            raise LeaseLost(f"job {self.job_id} is no longer owned by execution {self.execution_id}")
        self.checkpoint = data
