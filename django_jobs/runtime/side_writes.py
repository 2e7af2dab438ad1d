"""The writes a handler asks of the worker (heartbeat, progress, checkpoint, external-call
marks), run outside the handler's own transaction.

In a worker, the heartbeat's thread is the ``SideWriter``: it runs each write on its own
connection, so a write asked from inside the handler's ``transaction.atomic()`` neither waits
for that transaction nor locks the job row until it commits, and is durable at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class SideWriter(Protocol):
    """Runs a write of the execution (heartbeat, progress, checkpoint) outside the handler's
    own transaction, on the worker's connection, and returns its result or raises its error."""

    def run(self, write: Callable[[], T]) -> T: ...


class InlineWriter:
    """Runs side writes on the calling thread (no worker around: tests, a shell)."""

    def run(self, write: Callable[[], T]) -> T:
        return write()
