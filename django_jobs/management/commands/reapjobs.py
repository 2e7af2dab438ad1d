from __future__ import annotations

import argparse
import json
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs.maintenance import reaper
from django_jobs.management import pooling
from django_jobs.management.arguments import non_negative_float
from django_jobs.observe import metrics
from django_jobs.runtime import connectivity
from django_jobs.schema import require_migrated


class Command(BaseCommand):
    help = "Recover running jobs whose lease expired and prune finished jobs past retention."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep running every --interval seconds.")
        parser.add_argument(
            "--interval", type=non_negative_float, default=None, metavar="SECONDS",
            help="Seconds between passes with --loop. Default: DJANGO_JOBS['REAPER_INTERVAL'].",
        )  # fmt: skip
        parser.add_argument(
            "--json", action="store_true",
            help="Report what each pass did as JSON, job by job: id, type, lost execution, new "
            "status and why (one line per pass that did something, with --loop).",
        )  # fmt: skip
        parser.add_argument(
            "--otel-queue-gauges", action="store_true",
            help="With --loop: report the per-queue gauges through OpenTelemetry's meter provider "
            "(one process of the deployment, as each reads the database at every export).",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        if options["otel_queue_gauges"] and not options["loop"]:
            raise CommandError("--otel-queue-gauges needs --loop: a single pass ends before any export")
        connectivity.apply_connection_options()  # a dead peer is noticed in seconds
        require_migrated()
        pooling.look_for_poolers()
        if options["otel_queue_gauges"] and (why_not := metrics.observe_queues_through_otel()):
            raise CommandError(f"--otel-queue-gauges {why_not}")
        as_json = options["json"]
        if not options["loop"]:
            result = reaper.run_once()
            if as_json:
                self.stdout.write(json.dumps(result.as_dict(), indent=2))
            else:
                self.stdout.write(f"recovered {_counts(result.recovered)}; pruned {_counts(result.pruned)}")
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        on_pass = self._print_pass if as_json else None
        loop = reaper.ReaperLoop(stop, interval=options["interval"], on_pass=on_pass)
        loop.start()
        while loop.is_alive():
            loop.join(timeout=0.5)
        if not as_json:
            self.stdout.write(f"reaper stopped after {loop.passes} passes")

    def _print_pass(self, result: reaper.ReapResult) -> None:
        # JSON lines: an audit log of recoveries that a log shipper reads one pass at a time.
        if result.jobs or result.pruned:
            self.stdout.write(json.dumps(result.as_dict()))
            self.stdout.flush()


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return "nothing"
    return ", ".join(f"{n} → {status}" for status, n in sorted(counts.items()))
