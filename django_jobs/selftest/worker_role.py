"""One of the self-test's worker processes, from the inside: ``jobsselftest --worker NAME``.

The project's settings are loaded as they are; the self-test must still run its workers with
a short lease (a run should last seconds, not the minutes of a production ``LEASE_TIMEOUT``),
and cannot count on the settings reading the environment. So this process, and only this one,
replaces ``LEASE_TIMEOUT`` and ``HEARTBEAT_INTERVAL`` in its own copy of ``DJANGO_JOBS``
before it builds its worker: the project's settings module is not touched, and every other
setting (``NOTIFY``, ``POLL_INTERVAL``, the connection options…) is the project's, so that
what is measured is what its workers do.

The worker serves the self-test's queue only, fires no schedule and runs no reaper pass
(each would act on work that is not the self-test's); the run recovers its own queue's
expired leases itself. It exits on SIGTERM like ``runjobs``, writes its summary for the run to
read, and stops on its own if the run that started it is gone.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from django.conf import settings

from django_jobs import logs
from django_jobs.runtime.worker import Worker
from django_jobs.selftest.jobs import worker_id
from django_jobs.setting import user_settings

#: The heartbeat beats this many times per lease: a beat lost to a slow statement is not yet
#: a lost lease.
BEATS_PER_LEASE = 4
#: How long a stopping worker waits for its running jobs: the self-test's finish in
#: milliseconds, except one whose lease was lost, which learns it at its next beat.
GRACE = 10.0
#: How often it looks whether the run that started it is still there.
_ORPHAN_CHECK = 0.5


def heartbeat_for(lease: float) -> float:
    return lease / BEATS_PER_LEASE


def run(
    *, name: str, run_id: str, queue: str, lease: float, slots: int, stats_file: str, verbosity: int
) -> None:
    """Work the self-test's queue until SIGTERM; then write the worker's summary to ``stats_file``."""
    settings.DJANGO_JOBS = {
        **user_settings(),
        "LEASE_TIMEOUT": lease,
        "HEARTBEAT_INTERVAL": heartbeat_for(lease),
    }
    logs.install_console_handler(verbosity)
    worker = Worker(
        queues=[queue],
        concurrency=slots,
        worker_id=worker_id(run_id, name),
        grace=GRACE,
        handle_signals=True,
        reap=False,
        exits_after_run=True,
        schedules=False,
    )
    _stop_when_orphaned()
    worker.run()
    Path(stats_file).write_text(json.dumps(worker.stats.summary()))
    if worker.abandoned:
        # As runjobs: handlers still run past the grace period, on leases cut short on the
        # promise that they end with this process now.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(0)


def _stop_when_orphaned() -> None:
    """SIGTERM this process once its parent (the run) is gone: killed outright, it cannot stop
    its workers, and a worker of a run that no longer exists has nothing to do."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_ORPHAN_CHECK)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="jobsselftest-orphan-watch", daemon=True).start()
