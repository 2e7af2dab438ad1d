from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from django_jobs import reaper
from django_jobs.management.commands.runjobs import non_negative_float


class Command(BaseCommand):
    help = "Recover running jobs whose lease expired and prune finished jobs past retention."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep running every --interval seconds.")
        parser.add_argument(
            "--interval", type=non_negative_float, default=None, metavar="SECONDS",
            help="Seconds between passes with --loop. Default: DJANGO_JOBS['REAPER_INTERVAL'].",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["loop"]:
            result = reaper.run_once()
            self.stdout.write(f"recovered {_counts(result.recovered)}; pruned {_counts(result.pruned)}")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        loop = reaper.ReaperLoop(stop, interval=options["interval"])
        loop.start()
        while loop.is_alive():
            loop.join(timeout=0.5)
        self.stdout.write(f"reaper stopped after {loop.passes} passes")


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return "nothing"
    return ", ".join(f"{n} → {status}" for status, n in sorted(counts.items()))
