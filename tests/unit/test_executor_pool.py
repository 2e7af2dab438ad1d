"""The executor pool's own last resort: what it stores when running a job raised outside the
handler (``execute()`` never raises; a bug of ours or of a hook around it might)."""

from __future__ import annotations

import threading
import uuid

from django_jobs.decision import Happened
from django_jobs.errors import ErrorCode
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.lease import Lease
from django_jobs.runtime.pool import ExecutorPool, Held
from django_jobs.sanitize import REDACTED
from django_jobs.transitions import Claim


def claim() -> Claim:
    return Claim(
        7, "default", "emails.send", 1, "{}", 1, 5, uuid.uuid4(), None, None, 0, None, "retry", True, 0.0, 0.0
    )


def test_an_error_raised_around_the_handler_is_stored_sanitized_and_the_slot_lives_on() -> None:
    def execute(claim: Claim, lease: Lease) -> Finished:
        raise RuntimeError("a hook failed: Authorization: Bearer abcdefghijklmnop password=hunter22")

    ended: list[Finished] = []
    done = threading.Event()

    def on_finished(finished: Finished) -> None:
        ended.append(finished)
        done.set()

    pool = ExecutorPool(1, execute, on_finished)
    pool.start()
    c = claim()
    try:
        pool.submit([Held(c, Lease(c.id, c.execution_id, 30.0))])
        assert done.wait(10)
    finally:
        pool.stop()
        pool.join(5)

    finished = ended[0]
    assert (finished.happened, finished.error_code) == (Happened.RETRYABLE, ErrorCode.UNKNOWN)
    assert finished.error is not None and finished.error.startswith("RuntimeError: a hook failed")
    assert "abcdefghijklmnop" not in finished.error and "hunter22" not in finished.error
    assert REDACTED in finished.error
    assert finished.exception == "builtins.RuntimeError"
