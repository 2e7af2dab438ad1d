"""The connection a handler runs on (django_jobs/runtime/handler_connections.py): kept from one
job to the next, and a connection the jobs database lost is an outage, not the handler's failure.

``execute`` runs each handler on the calling thread's connections; the slot here is a thread
of its own, as a worker's slot is, so that cutting its connection leaves the test's alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from django.db import connection, connections, transaction

from django_jobs import ErrorCode, enqueue
from django_jobs.decision import Happened
from django_jobs.models import ProcessedEffect
from django_jobs.runtime.executor import Finished, execute
from django_jobs.runtime.handler_connections import reset_connections
from django_jobs.runtime.lease import Lease
from django_jobs.transitions import ClaimStatement, claim

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")

TYPES = {"test.noop": 1, "test.effect_row": 1, "test.permanent": 1, "test.cancelled_query": 1}


class Slot:
    """One thread that runs jobs on its own connections, as a worker's slot does."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1)

    def call(self, function: Callable[[], T]) -> T:
        return self._thread.submit(function).result(timeout=60)

    def run_next(self, job_type: str, payload: dict[str, object]) -> Finished:
        job = enqueue(job_type, payload)
        (claimed,) = [c for c in claim(ClaimStatement("slot", None, TYPES), 1) if c.id == job.id]
        return self.call(lambda: execute(claimed, Lease(claimed.id, claimed.execution_id, 60.0)))

    def backend_pid(self) -> int:
        return self.call(_backend_pid)

    def close(self) -> None:
        self.call(connections.close_all)
        self._thread.shutdown()


@pytest.fixture
def slot() -> Iterator[Slot]:
    slot = Slot()
    yield slot
    slot.close()


def _backend_pid() -> int:
    connection.ensure_connection()
    return int(connection.connection.info.backend_pid)


def _cut(pid: int) -> None:
    """End the backend ``pid`` from the server's side, as a network cut or a restart would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_a_slot_keeps_its_connection_from_one_job_to_the_next(slot: Slot) -> None:
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED
    before = slot.backend_pid()
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED
    assert slot.backend_pid() == before


def test_a_connection_lost_while_the_slot_idled_is_an_outage_even_once_django_replaced_it(slot: Slot) -> None:
    """The handler's first query meets the dead connection inside ``ctx.effect``'s atomic block;
    on the way out Django closes it and opens a sound one: the outage must still be seen."""
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED  # the slot's connection, kept
    _cut(slot.backend_pid())

    finished = slot.run_next("test.effect_row", {"n": 1, "pause": 0})

    assert (finished.happened, finished.error_code) == (Happened.OUTAGE, ErrorCode.DATABASE_UNAVAILABLE)
    assert not ProcessedEffect.objects.exists()  # the effect rolled back with its key
    # The slot goes on with a working connection: the next job runs on it.
    assert slot.run_next("test.effect_row", {"n": 2, "pause": 0}).happened is Happened.COMPLETED


def test_a_handler_failing_on_a_sound_connection_is_its_own_failure(slot: Slot) -> None:
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED
    finished = slot.run_next("test.permanent", {})
    assert (finished.happened, finished.error_code) == (Happened.PERMANENT, "ENTITY_NOT_FOUND")


def test_a_query_the_database_cancels_is_the_handler_failure_not_an_outage(slot: Slot) -> None:
    """``statement_timeout`` raises an OperationalError too, on a connection that stays sound."""
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED
    before = slot.backend_pid()
    finished = slot.run_next("test.cancelled_query", {})
    assert finished.happened is Happened.RETRYABLE and finished.error_code != ErrorCode.DATABASE_UNAVAILABLE
    assert "statement timeout" in (finished.error or "")
    assert slot.backend_pid() == before  # sound, and kept


@pytest.mark.django_db(transaction=True, databases=["default", "replica"])
def test_a_connection_a_later_job_opened_and_left_in_a_transaction_is_closed(slot: Slot) -> None:
    """The thread's first job finds its connections; one it opens afterwards, on another
    database, is named as it opens, and closed after its job if left in a transaction."""
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED

    def leave_a_transaction_open() -> int:
        transaction.atomic(using="replica").__enter__()  # a handler's block never exited
        with connections["replica"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    pid = slot.call(leave_a_transaction_open)
    slot.call(reset_connections)

    assert slot.call(lambda: connections["replica"].in_atomic_block) is False  # a fresh wrapper
    deadline = time.monotonic() + 10
    while _backend_alive(pid):  # its backend ends as the server sees the connection close
        assert time.monotonic() < deadline, f"backend {pid} still open: the transaction was left"
        time.sleep(0.05)
    assert slot.run_next("test.noop", {}).happened is Happened.COMPLETED


def _backend_alive(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cursor.fetchone()[0])
