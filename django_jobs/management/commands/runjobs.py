from __future__ import annotations

import argparse
import gc
import json
import logging
import os
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs import logs
from django_jobs.conf import jobs_settings
from django_jobs.management import pooling
from django_jobs.management.arguments import (
    MAX_CONCURRENCY,
    concurrency,
    non_negative_float,
    port,
    positive_int,
    queue_name,
)
from django_jobs.observe import metrics
from django_jobs.observe.probes import HealthFile, ProbeError
from django_jobs.registry import registry
from django_jobs.runtime import connectivity
from django_jobs.runtime.worker import POOLS, Worker
from django_jobs.schema import records_may_lag, require_migrated

if TYPE_CHECKING:
    from django_jobs.observe.probe_server import ProbeServer


class Command(BaseCommand):
    requires_migrations_checks = True  # warn at start-up when the job tables are behind the code
    help = "Run a worker: claim and execute jobs until stopped (SIGTERM/SIGINT drains, twice exits)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            type=queue_name,
            dest="queues",
            metavar="NAME[=SLOTS]",
            help="Serve this queue (repeatable). Default: every queue. The queues served take "
            "turns; NAME=SLOTS gives a queue that many slots of its own (then give every queue "
            "its slots; the concurrency is their sum).",
        )
        parser.add_argument(
            "--concurrency",
            type=concurrency,
            default=None,
            metavar="N",
            help="Jobs run at once, each on its own thread and database connection "
            f"(1 to {MAX_CONCURRENCY}). Default: 1.",
        )
        parser.add_argument(
            "--pool",
            choices=POOLS,
            default="thread",
            help="Where handlers run: threads of this process (default), or child processes the "
            "worker can kill at a job's deadline and recycle (see docs/workers.md).",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=positive_int,
            default=1000,
            metavar="N",
            help="With --pool process: replace a child after N jobs. Default: 1000.",
        )
        parser.add_argument(
            "--max-child-memory",
            type=positive_int,
            default=None,
            metavar="MB",
            help="With --pool process: replace a child once its peak memory passes MB megabytes.",
        )
        stop_when = parser.add_mutually_exclusive_group()
        stop_when.add_argument(
            "--burst", action="store_true", help="Exit once nothing is claimable and all is written."
        )
        stop_when.add_argument(
            "--until-settled",
            action="store_true",
            help="Exit once no job of the served types and queues is pending or running, waiting "
            "out retry backoffs (smoke tests, one-off scripts).",
        )
        parser.add_argument(
            "--grace",
            type=non_negative_float,
            default=30.0,
            metavar="SECONDS",
            help="On shutdown, how long running jobs may take to finish. Jobs still running then "
            "are left to their leases (cut short), never given back while they may run. Default: 30.",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=None,
            metavar="N",
            help="Most jobs claimed per statement. Default: DJANGO_JOBS['BATCH_SIZE'].",
        )
        parser.add_argument(
            "--no-reaper", action="store_true",
            help="Do not run the reaper in this worker (run `reapjobs --loop` elsewhere).",
        )  # fmt: skip
        parser.add_argument(
            "--metrics-port",
            type=port,
            default=None,
            metavar="PORT",
            help="Serve this worker's Prometheus metrics (/metrics) and its probes (/healthz, "
            "/readyz) over HTTP on PORT (0: a free port, logged). Needs prometheus-client (the "
            "prometheus extra).",
        )
        parser.add_argument(
            "--metrics-host",
            default="127.0.0.1",
            metavar="HOST",
            help="Address the metrics port listens on. Default: 127.0.0.1, this host only. Give "
            "0.0.0.0 for Prometheus and Kubernetes probes from outside the container, with "
            "DJANGO_JOBS['METRICS_TOKEN'] set: /metrics then asks for it as a bearer token.",
        )
        parser.add_argument(
            "--otel-queue-gauges",
            action="store_true",
            help="Report the per-queue gauges through OpenTelemetry's meter provider. Give it to "
            "one process of the deployment: each that does reads the database at every export.",
        )
        parser.add_argument(
            "--health-file",
            default=None,
            metavar="PATH",
            help="Touch PATH at least once a second while the worker is alive and useful, and "
            "never while it is not: the file's age is the health (exec probes, systemd timers).",
        )
        parser.add_argument(
            "--stats-file",
            default=None,
            metavar="PATH",
            help="Write the worker's summary (counts, claim latency percentiles) as JSON on exit.",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:
        # Before the migration check opens the first connection, which the claim loop keeps.
        connectivity.apply_connection_options()
        return super().execute(*args, **options)

    def check_migrations(self) -> None:
        # Django's warning loads every app's migration files, which a worker would keep for life.
        if records_may_lag():
            super().check_migrations()

    def handle(self, *args: Any, **options: Any) -> None:
        logs.install_console_handler(options["verbosity"])
        require_migrated()
        pooling.look_for_poolers()
        if not registry.names():
            raise CommandError("no job types are registered: is the app with your jobs.py installed?")
        queues, slots, workers = self._queues(options["queues"] or [], options["concurrency"])
        if options["otel_queue_gauges"]:
            if options["metrics_port"] is not None:
                raise CommandError("--otel-queue-gauges or --metrics-port: a worker reports through one")
            if why_not := metrics.observe_queues_through_otel():
                raise CommandError(f"--otel-queue-gauges {why_not}")
        server, health_file = self._probes(options)
        worker = Worker(
            queues=queues,
            concurrency=workers,
            queue_slots=slots,
            burst=options["burst"],
            until_settled=options["until_settled"],
            grace=options["grace"],
            batch_size=options["batch_size"],
            handle_signals=True,
            reap=not options["no_reaper"],
            exits_after_run=True,
            pool=options["pool"],
            max_jobs_per_child=options["max_jobs_per_child"],
            max_child_memory_mb=options["max_child_memory"],
            metrics=server is not None,
            health_file=health_file,
        )
        if server is not None:
            server.start(worker.liveness)
        # What start-up built (Django, the apps, the registry) lives as long as the process: out
        # of the collector's generations, a full collection no longer walks it all again while
        # the claims and outcomes of a busy worker fill the young generations.
        gc.freeze()
        try:
            worker.run()
        finally:
            if server is not None:
                server.stop()
        # The summary in words is the worker's last log line ("worker stopped id=…"), where
        # every other line it says goes: it is not printed a second time here.
        if options["stats_file"]:
            with open(options["stats_file"], "w") as f:
                json.dump(worker.stats.summary(), f)
        if worker.abandoned:
            # Handlers still run on threads past the grace period; their leases were cut to
            # EXIT_MARGIN on the promise that they end with this process now. Interpreter
            # shutdown would wait for any non-daemon thread a handler started: exit for sure.
            self.stdout.flush()
            self.stderr.flush()
            logging.shutdown()
            os._exit(0)

    @staticmethod
    def _probes(options: dict[str, Any]) -> tuple[ProbeServer | None, HealthFile | None]:
        """The metrics server (bound now: a port in use fails before any work) and the
        health file, as asked."""
        server = None
        if options["metrics_port"] is not None:
            if not metrics.usable():
                raise CommandError(
                    "--metrics-port needs prometheus-client: pip install 'django-jobs-pg[prometheus]'"
                )
            # The _created series of every counter would double a worker's output for nothing.
            metrics.disable_created_series()
            # Imported here: a worker without the port does not load http.server.
            from django_jobs.observe.probe_server import ProbeServer

            try:
                server = ProbeServer(
                    options["metrics_host"], options["metrics_port"], token=jobs_settings.METRICS_TOKEN
                )
            except ProbeError as exc:
                raise CommandError(f"--metrics-port: {exc}") from None
        health_file = None
        if options["health_file"] is not None:
            try:
                health_file = HealthFile(options["health_file"])
                health_file.check_writable()
            except ProbeError as exc:
                if server is not None:
                    server.stop()
                raise CommandError(f"--health-file: {exc}") from None
        return server, health_file

    @staticmethod
    def _queues(
        given: list[tuple[str, int | None]], concurrency: int | None
    ) -> tuple[list[str], dict[str, int] | None, int]:
        """The queues, their slots (None: all share every slot) and the concurrency."""
        names = [name for name, _ in given]
        if len(set(names)) != len(names):
            raise CommandError("a queue is named twice")
        slots = {name: n for name, n in given if n is not None}
        if not slots:
            return names, None, concurrency or 1
        if len(slots) != len(given):
            raise CommandError("give every queue its slots (--queue emails=4 --queue reports=1), or none")
        total = sum(slots.values())
        if concurrency is not None and concurrency != total:
            raise CommandError(
                f"the queues' slots add up to {total}: leave out --concurrency, or make it {total}"
            )
        if total > MAX_CONCURRENCY:
            raise CommandError(f"the queues' slots add up to {total}, more than {MAX_CONCURRENCY}")
        return names, slots, total
