"""The process pool (``runjobs --pool process``): each slot runs its jobs in a child process the
worker can kill.

A thread cannot be stopped from outside; a process can. Each slot of this pool owns one child
(started with ``spawn``: a fresh interpreter that sets Django up, never a fork of a threaded
worker) and hands it one job at a time over a pipe. The slot's thread, in the worker, watches:

- the deadline: a job that runs past its ``timeout`` + ``KILL_GRACE`` gets its child killed;
  it ends as a retryable failure with code ``TIMEOUT`` (the decision parks it for review if its
  type forbids a blind retry), and a new child takes the slot;
- the child's death (OOM killer, a segfault in a C extension): the job ends with code
  ``INTERRUPTED``, also ambiguous, and a new child takes the slot;
- cancel requests and lost leases, learnt by the worker's heartbeat, passed on to the child so
  that ``ctx.raise_if_cancelled()`` sees them without a query;
- recycling: a child is replaced after ``max_jobs`` jobs, or once its peak memory passes
  ``max_memory_mb`` (a leaking library).

Every fencing rule holds as with threads: the child runs the same executor, its outcome goes
back to the worker, which writes it with the same compare-and-set. A child dies with its
worker (``PR_SET_PDEATHSIG`` on Linux, a watch on the parent's pid elsewhere), so a SIGKILLed
worker leaves no execution running behind its lease. At shutdown past the grace period, the
children still running are killed, so their jobs are known to have stopped and are given back
at once (``interrupted``), unlike threads, which are left to their leases.

This module is the worker's side of each slot; what runs in the child is ``runtime/child.py``.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from django_jobs import logs
from django_jobs.decision import Happened
from django_jobs.errors import ErrorCode
from django_jobs.runtime.child import child_main, lease_terms
from django_jobs.runtime.executor import Finished
from django_jobs.runtime.pool import ExecutorPool, Held
from django_jobs.runtime.pooler import pooled_aliases
from django_jobs.transitions import Claim

logger = logging.getLogger("django_jobs.pool")

_SPAWN = multiprocessing.get_context("spawn")
#: Seconds a new child may take to set Django up before the worker gives up on it.
CHILD_START_TIMEOUT = 60.0
#: Seconds past its deadline a handler may take to notice it (``ctx.raise_if_cancelled()``)
#: before its child is killed: well before its lease, no longer extended, runs out.
KILL_GRACE = 0.25


@dataclass(eq=False)
class _Child:
    process: BaseProcess
    conn: Connection
    #: Shared bytes with the child: set once its current job's cancellation was requested /
    #: its lease was lost.
    cancel: Any
    lost: Any
    jobs: int = 0
    started: float = field(default_factory=time.monotonic)


class ProcessPool(ExecutorPool):
    def __init__(
        self,
        concurrency: int,
        on_finished: Any,
        *,
        max_jobs: int = 1000,
        max_memory_mb: float | None = None,
        on_start: Callable[[Claim], None] | None = None,
        may_start: Callable[[Claim], bool] | None = None,
    ) -> None:
        # ``may_start``: the worker's checks, made by the slot in the worker before it hands the
        # job to its child (``ExecutorPool._start``), as for threads.
        super().__init__(concurrency, execute=_unused, on_finished=on_finished, may_start=may_start)
        #: Called as a job is handed to its child (the worker sends ``job_started`` there: a
        #: receiver's state stays in the worker, with ``job_finished``'s).
        self._on_start = on_start
        self.max_jobs = max_jobs
        self.max_memory_mb = max_memory_mb
        self._children: dict[int, _Child] = {}
        self._children_lock = threading.Lock()
        self._interrupting = threading.Event()
        #: Children started, the first ones included (the worker's summary).
        self.children_started = 0

    def start(self) -> None:
        # Start the children first, all at once (each sets Django up: about half a second),
        # then the slots.
        children = {slot: self._start_child(wait=False) for slot in range(self.concurrency)}
        for child in children.values():
            self._wait_ready(child)
        self._children.update(children)
        super().start()

    def replace_stuck(self) -> list[Held]:
        return []  # each slot kills its own child at the deadline

    def interrupt(self) -> bool:
        """Kill the children that still run a job; their slots record them ``interrupted``."""
        self._interrupting.set()
        return True

    def join(self, timeout: float) -> None:
        super().join(timeout)
        with self._children_lock:
            children, self._children = list(self._children.values()), {}
        for child in children:
            self._stop_child(child)

    # ---- one job, in the slot's child -----------------------------------------------------------

    def _run(self, slot: int, held: Held) -> Finished:
        child = self._child(slot)
        claim, lease = held.claim, held.lease
        child.cancel.value, child.lost.value = 0, 0
        lease.start()
        if self._on_start is not None:
            self._on_start(claim)
        try:
            child.conn.send((claim, lease_terms(lease)))
            while not child.conn.poll(0.02):
                child.cancel.value = int(lease.cancel_requested)
                child.lost.value = int(lease.lost)
                if not child.process.is_alive():
                    raise EOFError
                if self._interrupting.is_set():
                    why = "the worker stopped past its grace period"
                    return self._kill(slot, held, Happened.INTERRUPTED, ErrorCode.INTERRUPTED, why)
                deadline = lease.deadline
                if deadline is not None and time.monotonic() > deadline + KILL_GRACE:
                    return self._kill(
                        slot, held, Happened.RETRYABLE, ErrorCode.TIMEOUT,
                        f"killed past its deadline (timeout={lease.timeout}s)",
                    )  # fmt: skip
            finished, peak_mb = child.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = child.process.exitcode
            self._replace(slot)
            logger.error(
                "child process died running job id=%s type=%s exit=%s", claim.id, claim.type, code,
                extra=logs.lease_fields(lease),
            )  # fmt: skip
            return Finished(
                claim,
                Happened.RETRYABLE,
                ErrorCode.INTERRUPTED,
                f"the child process running this job died (exit code {code})",
                ran_for=time.monotonic() - (lease.started or time.monotonic()),
                marked_call=None,  # it may have marked a call before it died
            )
        finally:
            lease.done = True
        child.jobs += 1
        too_big = self.max_memory_mb is not None and peak_mb >= self.max_memory_mb
        if child.jobs >= self.max_jobs or too_big:
            logger.info(
                "recycling child pid=%s: %s job(s) done, peak %.0f MB", child.process.pid, child.jobs, peak_mb
            )
            self._replace(slot)
        return finished  # type: ignore[no-any-return]

    def _kill(self, slot: int, held: Held, happened: Happened, code: str, why: str) -> Finished:
        logger.error(
            "killing the child running job id=%s type=%s: %s", held.claim.id, held.claim.type, why,
            extra=logs.lease_fields(held.lease),
        )  # fmt: skip
        self._replace(slot)
        started = held.lease.started or time.monotonic()
        # Killed mid-run: whether it had marked an external call is the child's secret.
        return Finished(held.claim, happened, code, why, ran_for=time.monotonic() - started, marked_call=None)

    # ---- children -------------------------------------------------------------------------------

    def _child(self, slot: int) -> _Child:
        with self._children_lock:
            child = self._children.get(slot)
        if child is None or not child.process.is_alive():
            child = self._replace(slot)
        if child is None:
            raise RuntimeError("the pool is being interrupted")
        return child

    def _replace(self, slot: int) -> _Child | None:
        """Kill the slot's child and start a new one (none while the pool is being interrupted)."""
        with self._children_lock:
            old = self._children.pop(slot, None)
        if old is not None:
            self._stop_child(old, kill=True)
        if self._interrupting.is_set():
            return None
        new = self._start_child()
        with self._children_lock:
            self._children[slot] = new
        return new

    def _start_child(self, wait: bool = True) -> _Child:
        """Start a child; with ``wait``, return once it is ready to run a job. A job's deadline
        counts from when its child has it, never while a new child is still setting up."""
        parent_conn, child_conn = _SPAWN.Pipe()
        cancel, lost = _SPAWN.Value("b", 0, lock=False), _SPAWN.Value("b", 0, lock=False)
        process = _SPAWN.Process(
            target=child_main,
            args=(child_conn, cancel, lost, os.getpid(), pooled_aliases()),
            name="django_jobs-child",
            daemon=True,
        )
        with _main_left_behind():
            process.start()
        child_conn.close()
        self.children_started += 1
        child = _Child(process, parent_conn, cancel, lost)
        if wait:
            self._wait_ready(child)
        return child

    def _wait_ready(self, child: _Child) -> None:
        if not child.conn.poll(CHILD_START_TIMEOUT) or child.conn.recv() != "ready":
            self._stop_child(child, kill=True)
            raise RuntimeError(f"a child process did not start within {CHILD_START_TIMEOUT}s")

    @staticmethod
    def _stop_child(child: _Child, kill: bool = False) -> None:
        with contextlib.suppress(Exception):
            if kill:
                child.process.kill()
            else:
                child.conn.send(None)  # asks the child to exit after its current job
            child.process.join(timeout=5)
            if child.process.is_alive():
                child.process.kill()
                child.process.join(timeout=5)
        with contextlib.suppress(Exception):
            child.conn.close()


_main_swap = threading.Lock()


@contextlib.contextmanager
def _main_left_behind() -> Iterator[None]:
    """While a child is started, ``__main__`` is an empty module. ``spawn`` runs the parent's
    main module again in each child (as ``__mp_main__``): a ``manage.py`` without an
    ``if __name__ == "__main__":`` guard would run ``runjobs`` once more there, and the child
    die before it is ready. A child needs nothing of it: :func:`child_main` sets Django up from
    the environment and ``sys.path`` it inherits."""
    with _main_swap:  # two slots may replace their children at once
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


def _unused(*args: Any) -> Finished:  # the slots of a process pool never execute in-process
    raise RuntimeError("a process pool runs jobs in its children")
