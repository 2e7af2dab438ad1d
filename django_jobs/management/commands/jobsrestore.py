from __future__ import annotations

import argparse
import getpass
import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs import transitions
from django_jobs.console import restore_holds
from django_jobs.management.arguments import job_id
from django_jobs.runtime.restore_watch import RECHECK
from django_jobs.schema import require_migrated


class Command(BaseCommand):
    help = (
        "Where restore safety stands (the database's identity, the open hold, the jobs of external "
        "types it holds), or declare a restore the workers cannot see, or release the open hold."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        verbs = parser.add_subparsers(dest="verb", metavar="status|declare|release")
        verbs.add_parser("status", help="The default: the identity, the open hold, what it holds.")
        for verb, what in (
            ("declare", "Open a hold for a restore the workers cannot see."),
            ("release", "Release the open hold: the jobs it kept reconcile first, or are parked."),
        ):
            sub = verbs.add_parser(verb, help=what)
            sub.add_argument("--reason", required=True, help="Why: kept with the hold.")
            sub.add_argument(
                "--actor", default=None,
                help="Who, on the hold. Default: the system user and host running this command.",
            )  # fmt: skip
            if verb == "release":
                sub.add_argument(
                    "--hold", type=int, default=None, metavar="ID",
                    help="The hold you looked at: refused if another one is open now.",
                )  # fmt: skip
                for answer, what in (
                    ("done", "Held jobs whose effect the provider shows done: completed, not run."),
                    ("not-done", "Held jobs the provider shows not done: they run again as they are."),
                ):
                    sub.add_argument(
                        f"--{answer}", type=job_id, nargs="+", action="extend", default=[], metavar="JOB",
                        help=what,
                    )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        verb = options["verb"] or "status"
        if verb == "status":
            self._status()
            return
        actor = options["actor"] or f"{getpass.getuser()}@{socket.gethostname()}"
        try:
            if verb == "declare":
                hold = restore_holds.declare(actor=actor, reason=options["reason"])
                self.stdout.write(f"restore hold {hold} declared: jobs of external types wait")
                self._workers_running()
            else:
                released = restore_holds.release(
                    actor=actor,
                    reason=options["reason"],
                    hold_id=options["hold"],
                    done=options["done"],
                    not_done=options["not_done"],
                )
                self._released(released)
        except (ValueError, transitions.ActionRefused) as exc:
            raise CommandError(str(exc)) from exc

    def _workers_running(self) -> None:
        found = restore_holds.status()
        if found.live_workers:
            self.stdout.write(
                f"{found.live_workers} worker(s) running: they start no job of an external type from "
                f"now on (within {RECHECK:g}s). {found.running_outside} job(s) of "
                "those types are running now and go on: if one is lost, it is reconciled or parked "
                "once the hold is released."
            )

    def _released(self, released: restore_holds.Released) -> None:
        settled = released.settled
        self.stdout.write(
            f"restore hold {released.hold_id} released: jobs of external types run again. Of the "
            f"jobs it kept, {settled.to_reconcile} ask their provider before they run again "
            f"(reconcile), {settled.to_review} were parked for review (their types cannot "
            f"reconcile), {settled.running} running are reconciled or parked if lost"
        )
        if settled.waiting:
            self.stdout.write(
                f"{settled.waiting} workflow step(s) wait for the jobs before them; once due, each "
                "asks its provider first (reconcile) or is parked for review"
            )
        if settled.done or settled.not_done:
            self.stdout.write(
                f"as you answered: {settled.done} completed without running, {settled.not_done} run again"
            )

    def _status(self) -> None:
        found = restore_holds.status()
        write = self.stdout.write
        write(f"this database now: {found.live.describe()}")
        if found.recorded is None:
            write("recorded: nothing yet (no worker has looked)")
        else:
            r = found.recorded
            write(
                f"recorded: database OID {r.database_oid}, system {r.system_identifier}, timeline "
                f"{r.timeline}, generation {r.generation}, at {r.looked_at:%Y-%m-%d %H:%M:%S %Z}"
            )
        hold = found.hold
        if hold is None:
            write("restore hold: none open")
        else:
            write(
                f"restore hold {hold.id}: open since {hold.opened_at:%Y-%m-%d %H:%M:%S %Z} "
                f"({hold.kind}, by {hold.opened_by}): {hold.evidence}"
            )
        write(f"job types whose effects may be outside the database: {', '.join(found.outside) or 'none'}")
        for (job_type, status), count in sorted(found.waiting.items()):
            write(f"  {job_type}: {count} {status}")
        if hold is not None:
            reconciling = ", ".join(found.reconcilable) or "none"
            write(
                "Jobs of these types wait while the hold is open. On release, those of types with "
                f"reconcile ({reconciling}) ask their provider before they run again; the others are "
                "parked for review, unless you answer for them: manage.py jobsrestore release "
                f"--hold {hold.id} --reason '...' [--done JOB ...] [--not-done JOB ...]"
            )
