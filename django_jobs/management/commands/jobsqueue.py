from __future__ import annotations

import argparse
import getpass
import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs import transitions
from django_jobs.console import pausing as queues
from django_jobs.schema import require_migrated


class Command(BaseCommand):
    help = (
        "Pause or resume a queue (its jobs wait; new ones are accepted; running ones finish), "
        "or list the queues and which are paused."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="pause|resume|list")
        for verb, what in (("pause", "Pause a queue."), ("resume", "Resume a paused queue.")):
            sub = verbs.add_parser(verb, help=what)
            sub.add_argument("name", metavar="NAME", help="The queue.")
            sub.add_argument("--reason", required=True, help="Why: kept in the queue's history.")
            sub.add_argument(
                "--actor", default=None,
                help="Who, in the history. Default: the system user and host running this command.",
            )  # fmt: skip
        verbs.add_parser("list", help="Every known queue, and who paused which, when and why.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        if options["verb"] == "list":
            self._list()
            return
        act = queues.pause_queue if options["verb"] == "pause" else queues.resume_queue
        actor = options["actor"] or f"{getpass.getuser()}@{socket.gethostname()}"
        try:
            act(options["name"], actor=actor, reason=options["reason"])
        except (ValueError, transitions.ActionRefused) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"queue {options['name']} {'paused' if act is queues.pause_queue else 'resumed'}")

    def _list(self) -> None:
        paused = {q.name: q for q in queues.paused_queues()}
        for name in queues.known_queues():
            q = paused.get(name)
            if q is None:
                self.stdout.write(f"{name}\trunning")
            else:
                since = f"{q.paused_at:%Y-%m-%d %H:%M:%S %Z}"
                self.stdout.write(f"{name}\tpaused since {since} by {q.paused_by}: {q.reason}")
