"""The child process of a process-pool slot: set Django up, then run the jobs its slot sends.

A child is started with ``spawn`` by its slot (``runtime/process_pool.py``), which pickles
:func:`child_main` by reference: it stays a module-level function of this module. The slot
sends one ``(claim, lease_terms(lease))`` at a time and reads back ``(Finished, peak_mb)``;
``None`` asks the child to exit. What the worker's heartbeat learns of the job (cancel
requested, lease lost) comes through two shared bytes, copied to the child's lease so that
``ctx.raise_if_cancelled()`` sees it without a query. A child dies with its worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from django_jobs.runtime.lease import Lease


def lease_terms(lease: Lease) -> dict[str, Any]:
    """What a slot sends its child of a lease: the child rebuilds the lease from it."""
    return {
        "job_id": lease.job_id,
        "execution_id": lease.execution_id,
        "duration": lease.duration,
        "beats": lease.beats,
        "timeout": lease.timeout,
        "counted": lease.counted,
        "claimed_db": lease.claimed_db,
        "worker_id": lease.worker_id,
        # The child's clock: the claim happened this long ago.
        "claimed_ago": time.monotonic() - lease.claimed,
    }


def child_main(
    conn: Connection, cancel: Any, lost: Any, parent_pid: int, pooled: tuple[str, ...] = ()
) -> None:
    """A child's life: set Django up, then run the jobs its slot sends until told to stop.
    ``pooled``: the aliases the worker treats as pooled in transaction mode, some perhaps found
    by ``runjobs`` rather than declared in the settings the child reads."""
    _die_with_parent(parent_pid)
    # The worker decides when its children stop; a Ctrl-C sent to the whole process group
    # must not cut a handler short behind the worker's back.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import django

    django.setup()
    from django_jobs.runtime import connectivity, pooler
    from django_jobs.runtime.executor import execute

    connectivity.apply_connection_options()  # the worker's: a dead peer is noticed in seconds
    for alias in pooled:  # before the side writes' first connection sets anything on a session
        pooler.treat_as_pooled(alias)
    from django_jobs.runtime.heartbeat import Heartbeat

    # Side writes (heartbeat, progress, checkpoint) run on a thread with a connection of its
    # own, never inside the handler's transaction, as in the worker.
    side_writer = Heartbeat(lambda: [])
    side_writer.start()
    current: list[Lease] = []
    threading.Thread(target=_mirror_flags, args=(current, cancel, lost), daemon=True).start()
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        claim, terms = message
        claimed_ago = terms.pop("claimed_ago")
        lease = Lease(**terms, claimed=time.monotonic() - claimed_ago, claim=claim)
        current[:] = [lease]
        finished = execute(claim, lease, side_writer=side_writer)
        current.clear()
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        conn.send((finished, peak_mb))


def _mirror_flags(current: list[Lease], cancel: Any, lost: Any) -> None:
    """Copy what the worker's heartbeat learnt (cancel requested, lease lost) to the job's lease."""
    while True:
        time.sleep(0.02)
        for lease in list(current):
            if cancel.value:
                lease.cancel_requested = True
            if lost.value:
                lease.lost = True


def _die_with_parent(parent_pid: int) -> None:
    """A child must never outlive its worker: its job's lease would lapse while it still runs."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:  # elsewhere (and as a second line): poll the parent's pid
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
