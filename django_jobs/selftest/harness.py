"""What every step of a self-test run stands on: what it was asked for (``Plan``), its workers,
and one way of waiting (``Harness.until``), which is also the run's reaper.

The run is its own queue's reaper: while it waits for anything, it recovers the expired leases
of its queue, and of no other (its workers run no reaper pass, which would act on every
queue). A wait that does not end gives up after ``Plan.patience`` and says what it waited
for, with the last lines of the workers still serving; a worker that exits when the run did
not stop it fails the run with its last lines.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django_jobs.maintenance import rescuer
from django_jobs.models import Job, LiveWorker
from django_jobs.selftest.figures import Figures
from django_jobs.selftest.processes import WorkerProcess
from django_jobs.selftest.worker_role import GRACE

T = TypeVar("T")
Say = Callable[[str], None]

DEFAULT_QUEUE = "django_jobs_selftest"
DEFAULT_JOBS = 300
DEFAULT_LEASE = 2.0
#: Slots of each worker.
SLOTS = 4
#: How often the run looks again while it waits (and recovers its queue's expired leases).
POLL = 0.05


class GuaranteeBroken(Exception):
    """A guarantee did not hold, or a step could not finish: what was expected, what was found."""


@dataclass(frozen=True)
class Plan:
    """What the run was asked for."""

    queue: str = DEFAULT_QUEUE
    jobs: int = DEFAULT_JOBS
    lease: float = DEFAULT_LEASE
    keep: bool = False

    @property
    def patience(self) -> float:
        """How long one step may take before the run gives up on it: worker processes start
        in seconds, a lease is recovered within about a lease."""
        return 60.0 + 10 * self.lease


class Harness:
    """One run: its id, its workers, what it measured, and the jobs whose effects it checks."""

    def __init__(self, plan: Plan, say: Say) -> None:
        self.plan = plan
        self.say = say
        self.run_id = secrets.token_hex(4)
        self.workers: dict[str, WorkerProcess] = {}
        self.figures = Figures()
        #: The jobs that apply an effect, for the check of effects.
        self.with_effect: list[int] = []

    def until(self, look: Callable[[], T | None], what: str) -> T:
        """Wait for ``look`` to return something, recovering the queue's expired leases
        meanwhile; fail if a worker died on its own, or after ``Plan.patience``."""
        deadline = time.monotonic() + self.plan.patience
        while True:
            rescuer.recover_jobs(queue=self.plan.queue)
            found = look()
            if found:
                return found
            for worker in self.workers.values():
                status = worker.exited()
                if status is not None and worker.state == "running":
                    raise GuaranteeBroken(
                        f"{worker.label} exited on its own (status {status}) while the run waited for "
                        f"{what}; its last lines:\n{worker.tail()}"
                    )
            if time.monotonic() > deadline:
                raise GuaranteeBroken(
                    f"gave up after {self.plan.patience:.0f} s waiting for {what}{self._last_lines()}"
                )
            time.sleep(POLL)

    def _last_lines(self) -> str:
        """The last lines of each worker that should still be serving: what it was doing when
        the run gave up (stuck connecting, importing, or waiting for a lock) is usually there."""
        told = []
        for worker in self.workers.values():
            if worker.state in ("running", "stopping"):
                tail = worker.tail(lines=10) or "(no output yet)"
                told.append(f"\n{worker.label}, {worker.state}; its last lines:\n{tail}")
        return "".join(told)

    @staticmethod
    def all_finished(ids: list[int]) -> bool:
        return Job.objects.filter(id__in=ids, finished_at__isnull=False).count() == len(ids)

    def worker_of(self, worker_id: str | None) -> WorkerProcess:
        """The run's worker that goes by ``worker_id``."""
        for worker in self.workers.values():
            if worker.worker_id == worker_id:
                return worker
        raise GuaranteeBroken(
            f"worker {worker_id} ran a job of the run and is not one of its workers: another process "
            f"serves queue {self.plan.queue!r} with the self-test's job types"
        )

    def start(self, *names: str) -> None:
        """Start the workers ``names``; return once each has reported itself alive."""
        plan = self.plan
        for name in names:
            self.workers[name] = WorkerProcess(
                name=name, run=self.run_id, queue=plan.queue, lease=plan.lease, slots=SLOTS
            )
        ids = [self.workers[name].worker_id for name in names]
        self.until(
            lambda: LiveWorker.objects.filter(worker_id__in=ids).count() == len(ids),
            f"worker {' and '.join(names)} to start",
        )
        started = " and ".join(self.workers[name].label for name in names)
        each = " each" if len(names) > 1 else ""
        self.say(f"started {started}: {SLOTS} slots{each}, serving only queue {plan.queue!r}")

    def stop(self, worker: WorkerProcess) -> int:
        """SIGTERM ``worker`` and wait for it to exit; its exit status."""
        try:
            return worker.stop(timeout=GRACE + self.plan.patience)
        except subprocess.TimeoutExpired:
            raise GuaranteeBroken(
                f"{worker.label} did not exit after a SIGTERM; its last lines:\n{worker.tail()}"
            ) from None

    def discard_workers(self) -> None:
        """Make sure no worker of the run is left, whatever state it was left in."""
        for worker in self.workers.values():
            worker.discard()
