"""One self-test per queue at a time: a marker job, held by a unique key.

A run starts by enqueuing a job of type ``django_jobs.selftest.run`` into its queue with the
unique key ``queue:<name>``. The job table's unique index on active keys is the compare-and-set:
of two runs that enqueue at once, one inserts the marker and the other is handed the holder
(``enqueue()`` returns it), and is refused. The marker is scheduled a day ahead, so no worker
claims it while the run lasts; it is removed with the run's other jobs.

Why not a PostgreSQL advisory lock: a session-level one is lost (or worse, shared) behind
PgBouncer in transaction mode, and a transaction-level one, or a row lock, would keep a
transaction open for the whole run, holding back vacuum. The marker is a plain row: it
works through any pooler, shows in the console as what it is, and says who holds the queue
(run, host, pid, since when). A run killed outright (SIGKILL) leaves it behind; the next run's
refusal says so, and ``--clean`` removes it.
"""

from __future__ import annotations

import datetime as dt
import os
import socket

from django_jobs.enqueueing import enqueue
from django_jobs.models import Job
from django_jobs.selftest.jobs import RUN
from django_jobs.selftest.preflight import Refused, another_run

#: Far enough ahead that no worker claims the marker while a run lasts.
MARKER_DELAY = dt.timedelta(days=1)


def unique_key(queue: str) -> str:
    return f"queue:{queue}"


def take(queue: str, run: str) -> Job:
    """Hold ``queue`` for ``run``: its marker job. Raises :class:`Refused` if another run holds it."""
    marker = enqueue(
        RUN,
        {"run": run, "host": socket.gethostname(), "pid": os.getpid()},
        queue=queue,
        unique_key=unique_key(queue),
        delay=MARKER_DELAY,
    )
    # The holder, if another run's marker was there first: its payload names it.
    held = Job.objects.get(id=marker.id)
    if not isinstance(held.payload, dict) or held.payload.get("run") != run:
        raise Refused(another_run(queue, held))
    return held


def holder(queue: str) -> Job | None:
    """The marker of the run that holds ``queue``, if one does."""
    return Job.objects.filter(queue=queue, type=RUN).order_by("id").first()


def runs_here(marker: Job) -> bool:
    """Whether the run of ``marker`` is a live process of this host (a run elsewhere, or one
    whose process is gone, cannot be told apart from here: ``--clean`` trusts the operator)."""
    payload = marker.payload if isinstance(marker.payload, dict) else {}
    pid = payload.get("pid")
    if payload.get("host") != socket.gethostname() or not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a process of another user: alive
    return True
