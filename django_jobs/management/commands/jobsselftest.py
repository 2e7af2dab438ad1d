from __future__ import annotations

import argparse
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from django_jobs.management import pooling
from django_jobs.management.arguments import int_between, queue, seconds_between
from django_jobs.runtime import connectivity
from django_jobs.schema import require_migrated
from django_jobs.selftest import cleanup, lock, worker_role
from django_jobs.selftest.harness import DEFAULT_JOBS, DEFAULT_LEASE, DEFAULT_QUEUE, GuaranteeBroken, Plan
from django_jobs.selftest.jobs import WORKER_NAMES
from django_jobs.selftest.preflight import Refused
from django_jobs.selftest.run import run

#: Exit statuses: a guarantee that did not hold is 1 (CommandError's); a refusal, with nothing
#: written, is 2 (as for a bad argument); an interrupted run, 130 (as a shell says Ctrl-C).
REFUSED = 2
INTERRUPTED = 130


class Command(BaseCommand):
    help = (
        "Prove django_jobs' guarantees on this database with these settings: in a queue of its own, "
        "start two workers, SIGKILL one mid-job and SIGSTOP another past its lease; check recovery, "
        "fencing, retries and effects-once; report claim latency, recovery time and throughput; then "
        "remove everything it wrote. Exit status 0: every guarantee held; 1: one did not; 2: refused "
        "(nothing was written)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue", type=queue, default=DEFAULT_QUEUE, metavar="NAME",
            help=f"The queue the self-test runs in; it must hold no job of yours. Default: {DEFAULT_QUEUE}.",
        )  # fmt: skip
        parser.add_argument(
            "--jobs", type=int_between(1, 10_000), default=DEFAULT_JOBS, metavar="N",
            help=f"Jobs enqueued at once for the throughput (1 to 10,000). Default: {DEFAULT_JOBS}.",
        )  # fmt: skip
        parser.add_argument(
            "--lease", type=seconds_between(0.5, 60), default=DEFAULT_LEASE, metavar="SECONDS",
            help="The lease of the self-test's workers (their heartbeat beats four times per lease); "
            f"your settings are not changed. Default: {DEFAULT_LEASE:g}.",
        )  # fmt: skip
        what_then = parser.add_mutually_exclusive_group()
        what_then.add_argument(
            "--keep", action="store_true",
            help="Keep the run's jobs, events and ledger keys (and say where they are): remove nothing.",
        )  # fmt: skip
        what_then.add_argument(
            "--clean", action="store_true",
            help="Run nothing: remove what earlier runs left in the queue (kept, or interrupted).",
        )  # fmt: skip
        # One of the self-test's own worker processes (django_jobs.selftest.processes starts them).
        parser.add_argument("--worker", choices=WORKER_NAMES, help=argparse.SUPPRESS)
        parser.add_argument("--run", help=argparse.SUPPRESS)
        parser.add_argument("--slots", type=int_between(1, 64), default=4, help=argparse.SUPPRESS)
        parser.add_argument("--stats-file", help=argparse.SUPPRESS)

    def execute(self, *args: Any, **options: Any) -> str | None:
        if options.get("worker"):
            # As runjobs: before the first connection opens.
            connectivity.apply_connection_options()
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        # As runjobs and reapjobs: the run enqueues and recovers, its workers claim; behind a
        # pooler in transaction mode none of it may outlive a transaction.
        pooling.look_for_poolers()
        if options["worker"]:
            worker_role.run(
                name=options["worker"], run_id=options["run"], queue=options["queue"], lease=options["lease"],
                slots=options["slots"], stats_file=options["stats_file"], verbosity=options["verbosity"],
            )  # fmt: skip
            return
        try:
            with _sigterm_interrupts():
                if options["clean"]:
                    self._clean(options["queue"])
                    return
                plan = Plan(
                    queue=options["queue"], jobs=options["jobs"], lease=options["lease"], keep=options["keep"]
                )
                run(plan, self._say)
        except Refused as exc:
            raise CommandError(f"refused: {exc}", returncode=REFUSED) from None
        except GuaranteeBroken as exc:
            raise CommandError(f"FAILED: {exc}") from None
        except KeyboardInterrupt:
            raise CommandError("interrupted", returncode=INTERRUPTED) from None
        except DatabaseError as exc:
            raise CommandError(f"the database refused a statement of the self-test: {exc}") from None
        self._say("PASSED: every guarantee held on this database")

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # each step as it happens, even into a pipe

    def _clean(self, name: str) -> None:
        marker = lock.holder(name)
        if marker is not None and lock.runs_here(marker):
            pid = marker.payload.get("pid") if isinstance(marker.payload, dict) else None
            raise Refused(
                f"the self-test holding queue {name!r} still runs here as pid {pid}: stop it (Ctrl-C or "
                "SIGTERM) and it removes what it wrote itself"
            )
        self._say(cleanup.described(cleanup.remove(name)) + f" from queue {name!r}")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does: it stops its workers and removes what it wrote."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
