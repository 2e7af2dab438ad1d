"""``manage.py jobs retry|cancel`` on a filter, and ``jobs operation``: what the console's
"Retry all N matching…" does, from a shell.

A dry run unless ``--apply`` is given: it prints how many jobs match (exact, or the planner's
estimate, and says which) and the newest of them. With ``--apply`` it starts the bulk operation
(:mod:`django_jobs.console.bulk`) and says how to follow it; ``--wait`` follows it here.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, OutputWrapper

from django_jobs.console import bulk
from django_jobs.console.job_filter import CODE_RE, InvalidFilter, JobFilter, describe, parse_moment
from django_jobs.management.arguments import int_between, matching
from django_jobs.models import BulkAction, BulkOperation, BulkOperationJob, BulkOutcome, BulkState, Job
from django_jobs.names import MAX_JOB_ID, NAME_RE, QUEUE_RE
from django_jobs.states import JobStatus

if TYPE_CHECKING:
    from django_jobs.console.actions import Actor

#: The filter's command-line options, by the ``JobFilter`` part each one gives.
FILTER_OPTIONS = ("status", "code", "queue", "type", "since", "until", "workflow", "search")
#: How often ``--wait`` reads the operation.
_WAIT_STEP = 1.0


def _moment(text: str) -> Any:
    try:
        return parse_moment(text)
    except InvalidFilter as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_filter_arguments(sub: argparse.ArgumentParser, action: str) -> None:
    """The options of an action on every job a filter matches."""
    group = sub.add_argument_group(
        "or every job a filter matches",
        "Instead of ids: the jobs that meet every option given. A dry run unless --apply is given.",
    )
    group.add_argument("--status", choices=JobStatus.values, help="Only jobs in this status.")
    group.add_argument(
        "--code", type=matching(CODE_RE, "an error code"), help="Whose last error had this code."
    )
    group.add_argument("--queue", type=matching(QUEUE_RE, "a queue name"), help="Only jobs of this queue.")
    group.add_argument("--type", type=matching(NAME_RE, "a job type name"), help="Only jobs of this type.")
    group.add_argument(
        "--since", type=_moment, metavar="TIME",
        help="Ended at or after TIME: 2026-12-04T14:00 (project time zone unless one is given), 14:00 "
        "(today), or an age such as 2h, 30m, 1d.",
    )  # fmt: skip
    group.add_argument("--until", type=_moment, metavar="TIME", help="Ended before TIME (as --since).")
    group.add_argument(
        "--workflow", type=int_between(1, MAX_JOB_ID), metavar="ID", help="Only jobs of this workflow."
    )
    group.add_argument("--search", metavar="TERM", help="As the console's search: an id, type, key or code.")
    group.add_argument(
        "--pace", type=int_between(1, bulk.MAX_PACE), metavar="N",
        help=f"At most N jobs per second (default {bulk.DEFAULT_PACE[BulkAction(action)]}).",
    )  # fmt: skip
    group.add_argument("--apply", action="store_true", help="Start the operation (default: a dry run).")
    group.add_argument("--wait", action="store_true", help="With --apply: follow it until it ends.")


def filter_given(options: dict[str, Any]) -> bool:
    return any(options.get(name) is not None for name in FILTER_OPTIONS)


def job_filter(options: dict[str, Any]) -> JobFilter:
    try:
        return JobFilter(
            status=options["status"], code=options["code"], queue=options["queue"], type=options["type"],
            ended_since=options["since"], ended_until=options["until"], workflow=options["workflow"],
            search=options["search"],
        )  # fmt: skip
    except InvalidFilter as exc:
        raise CommandError(str(exc)) from None


def act_on_matching(stdout: OutputWrapper, verb: str, options: dict[str, Any], actor: Actor) -> None:
    """The dry run, or the start of the operation (and, with ``--wait``, its end)."""
    parts = job_filter(options)
    try:
        seen = bulk.matching(verb, parts)
    except InvalidFilter as exc:
        raise CommandError(str(exc)) from None
    if not options["apply"]:
        _write_matching(stdout, seen)
        if seen.count and not seen.over_cap:
            stdout.write("Dry run: nothing changed. Add --apply to start the operation.")
        return
    try:
        operation = bulk.start(verb, parts, reason=options["reason"], actor=actor, pace=options["pace"])
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    stdout.write(
        f"operation {operation.id} started: {verb} of {operation.total} job(s) matching "
        f"{parts.describe()}, at most {operation.pace} a second, carried out by job {operation.job_id}"
    )
    if options["wait"]:
        operation = _wait(stdout, operation)
    else:
        stdout.write(f"Follow it with: manage.py jobs operation {operation.id}")


def write_operation(stdout: OutputWrapper, operation: BulkOperation) -> None:
    stdout.write(
        f"operation {operation.id}: {operation.action} of {operation.total} job(s) matching "
        f"{describe(operation.filter)}"
    )
    stdout.write(f"  by {operation.actor}: {operation.reason}")
    stdout.write(
        f"  {operation.state}: {operation.done} done, {operation.skipped} skipped, {operation.left} left "
        f"(at most {operation.pace} a second; job {operation.job_id})"
    )
    if operation.state == BulkState.CANCELLED:
        stdout.write(f"  stopped by {operation.cancelled_by}: {operation.cancel_reason}")
    skipped = (
        BulkOperationJob.objects.using(operation._state.db)
        .filter(operation=operation)
        .exclude(outcome=BulkOutcome.DONE)
        .exclude(outcome__isnull=True)
        .order_by("job_id")
    )
    for item in skipped[:20]:
        stdout.write(f"  skipped job {item.job_id}: {BulkOutcome(str(item.outcome)).label}")


def _write_matching(stdout: OutputWrapper, seen: bulk.Matching) -> None:
    done = "retry" if seen.action == "retry" else "cancel"
    about = "" if seen.exact else "about "
    how = "" if seen.exact else " (the planner's estimate: counting them exactly would take too long)"
    stdout.write(f"would {done} {about}{seen.count:,} job(s) matching {seen.filter.describe()}{how}")
    if seen.over_cap:
        raise CommandError(
            f"one operation takes at most {bulk.MAX_OPERATION_JOBS:,} jobs: narrow the filter "
            "(--since/--until, --queue, --code) and act on each part"
        )
    if not seen.count:
        raise CommandError("no job matches: nothing to do")
    if seen.sample is None:
        stdout.write("no sample: reading the newest of them took too long")
        return
    stdout.write(f"the newest {len(seen.sample)}:")
    for job in seen.sample:
        stdout.write("  " + "\t".join(_row(job)))


def _row(job: Job) -> list[str]:
    ended = f"{job.finished_at:%Y-%m-%d %H:%M:%S %Z}" if job.finished_at else "-"
    return [
        str(job.id), job.status, job.type, job.queue, f"{job.attempts}/{job.max_attempts}",
        job.last_error_code or "-", ended,
    ]  # fmt: skip


def _wait(stdout: OutputWrapper, operation: BulkOperation) -> BulkOperation:
    while operation.state == BulkState.RUNNING:
        time.sleep(_WAIT_STEP)
        operation.refresh_from_db()
        stdout.write(f"  {operation.done} done, {operation.skipped} skipped, {operation.left} left")
    write_operation(stdout, operation)
    return operation
