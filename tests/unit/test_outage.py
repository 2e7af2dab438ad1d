"""The one back-off of a worker while the database is away (django_jobs/runtime/outage.py)."""

from __future__ import annotations

import threading
import time

from django.db import OperationalError

from django_jobs.runtime.outage import DB_RETRY_FIRST, DB_RETRY_MAX, Outage


def test_each_failure_waits_twice_as_long_up_to_the_ceiling() -> None:
    outage = Outage(first=0.1, longest=0.5)
    assert [outage.failed() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]


def test_an_answer_starts_the_next_outage_from_the_first_wait() -> None:
    outage = Outage()
    outage.failed(), outage.failed()
    outage.answered()
    assert outage.failed() == DB_RETRY_FIRST == 0.1


def test_the_defaults_are_the_documented_reconnect_back_off() -> None:
    outage = Outage()
    waits = [outage.failed() for _ in range(10)]
    assert waits[:3] == [0.1, 0.2, 0.4]
    assert max(waits) == DB_RETRY_MAX == 5.0


def test_waiting_out_an_outage_ends_when_its_event_is_set_and_still_counts() -> None:
    outage = Outage(first=30.0, longest=60.0)
    stopping = threading.Event()
    stopping.set()  # a worker that is stopping does not sit out the back-off
    started = time.monotonic()
    waited = outage.wait_out(OperationalError("gone"), until=stopping, worker_id="w")
    assert time.monotonic() - started < 1.0
    assert (waited, outage.wait) == (30.0, 60.0)
