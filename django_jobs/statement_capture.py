"""The SQL statements a block runs, seen through Django's execute wrappers: the ORM's, and
django_jobs' hot statements (the claim, heartbeats, outcome writes), which otherwise bypass the
wrappers on a cursor of their own (``transitions.cursor.bound_cursor``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, overload

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from django_jobs.conf import jobs_settings
from django_jobs.transitions.cursor import through_execute_wrappers


@dataclass(frozen=True)
class Statement:
    """One statement run while the capture was open."""

    sql: str
    params: Any
    #: Whether it was run by ``executemany``.
    many: bool
    #: The database alias it ran on.
    alias: str
    #: The name of the thread that ran it (a worker's threads name themselves).
    thread: str
    #: Seconds it took, by this process's clock; a statement that raised is recorded too.
    seconds: float


class CapturedStatements(Sequence[Statement]):
    """The statements recorded by :func:`capture_statements`, in the order they ended; a list
    that the threads of the block may still be adding to until it closes."""

    def __init__(self) -> None:
        self._statements: list[Statement] = []
        self._lock = threading.Lock()

    def add(self, statement: Statement) -> None:
        with self._lock:
            self._statements.append(statement)

    @overload
    def __getitem__(self, index: int) -> Statement: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Statement]: ...
    def __getitem__(self, index: int | slice) -> Statement | Sequence[Statement]:
        with self._lock:
            return self._statements[index]

    def __len__(self) -> int:
        with self._lock:
            return len(self._statements)

    def containing(self, text: str) -> list[Statement]:
        """The statements whose SQL contains ``text`` (``"django_jobs_job"``, ``"FOR UPDATE"``)."""
        with self._lock:
            return [s for s in self._statements if text in s.sql]

    @property
    def sql(self) -> list[str]:
        """The SQL of every statement, in order."""
        with self._lock:
            return [s.sql for s in self._statements]


@contextmanager
def capture_statements(using: Sequence[str] | None = None) -> Iterator[CapturedStatements]:
    """Record every statement run on the ``using`` aliases (default: the jobs database) while
    the block runs, through ``connection.execute_wrapper``: on this thread's connection, and on
    each connection opened during the block, by any thread (a worker's, ``run_jobs()``'s).

    It includes django_jobs' own hot statements, which pass through the execute wrappers while
    a capture is open (theirs and any other wrapper's), as an ORM statement does. A
    connection another thread opened before the block is not seen.
    """
    aliases = frozenset(using or (jobs_settings.DATABASE,))
    captured = CapturedStatements()
    wrapped: list[BaseDatabaseWrapper] = []
    lock = threading.Lock()

    def record(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            captured.add(
                Statement(
                    str(sql), params, many, context["connection"].alias, threading.current_thread().name,
                    time.perf_counter() - started,
                )
            )  # fmt: skip

    def install(connection: BaseDatabaseWrapper) -> None:
        with lock:
            if connection.alias in aliases and record not in connection.execute_wrappers:
                # First, not last: Django's execute_wrapper() blocks pop the last one at their
                # end, and one may be open on this connection; ours is removed by identity.
                connection.execute_wrappers.insert(0, record)
                wrapped.append(connection)

    def opened(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
        install(connection)

    connection_created.connect(opened, weak=False)
    try:
        for alias in aliases:
            install(connections[alias])
        with through_execute_wrappers():
            yield captured
    finally:
        connection_created.disconnect(opened)
        with lock:
            for connection in wrapped:
                if record in connection.execute_wrappers:
                    connection.execute_wrappers.remove(record)
