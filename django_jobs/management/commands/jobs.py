"""``manage.py jobs retry|cancel|wake|signal|explain|list|operation``: what the console does,
from a shell.

Thin: it parses, then calls ``django_jobs.console.actions`` and ``console.durable_actions``
(the console's own audited paths),
``django_jobs.console.bulk`` (retry or cancel every job a filter matches; see
``management.matching``) and ``diagnosis.explain``. Every bad value is refused by the parser
with what was wrong.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from django_jobs.conf import jobs_settings
from django_jobs.console import actions as operations
from django_jobs.console import bulk, durable_actions
from django_jobs.console.job_filter import CODE_RE
from django_jobs.durable_rules import InvalidSignal
from django_jobs.errors import JobNotFound
from django_jobs.management import arguments, matching
from django_jobs.management.commands.explainjob import job_id, write_explanation
from django_jobs.models import BulkOperation, Job
from django_jobs.names import NAME_RE, QUEUE_RE
from django_jobs.schema import require_migrated
from django_jobs.states import JobStatus
from django_jobs.transitions import ActionRefused, CancelResult


def _reason(text: str) -> str:
    problem = operations.reason_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _actor(text: str) -> str:
    if not text.strip() or "\x00" in text or len(text) > operations.MAX_ACTOR_CHARS:
        raise argparse.ArgumentTypeError(
            f"the actor must be 1 to {operations.MAX_ACTOR_CHARS} printable characters"
        )
    return text


def _limit(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= operations.MAX_LISTED:
        raise argparse.ArgumentTypeError(f"{text!r} is not a limit: give 1 to {operations.MAX_LISTED}")
    return int(text)


def _signal_data(text: str) -> Any:
    try:
        return durable_actions.parse_data(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_action(sub: argparse.ArgumentParser, verb: str) -> None:
    sub.add_argument("ids", nargs="*", type=job_id, metavar="ID", help="The jobs' ids; each is done alone.")
    _add_who(sub)
    matching.add_filter_arguments(sub, verb)


def _add_durable(verbs: Any) -> None:
    wake = verbs.add_parser("wake", help="End the sleep of sleeping durable jobs now: due at once.")
    wake.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="The jobs' ids; each is done alone.")
    _add_who(wake)
    signal = verbs.add_parser("signal", help="Send a durable job a signal, as its webhook would, by its id.")
    signal.add_argument("id", type=job_id, help="The job's id.")
    signal.add_argument("name", help="The signal's name, as the job's ctx.wait_for() names it.")
    signal.add_argument(
        "--data", type=_signal_data, default=None, help="The signal's data as JSON (default null)."
    )
    _add_who(signal)


def _add_who(sub: argparse.ArgumentParser) -> None:
    """Why, and who: the reason, and an actor's name or a Django user."""
    sub.add_argument("--reason", required=True, type=_reason, help="Why: kept in the job's history.")
    who = sub.add_mutually_exclusive_group()
    who.add_argument(
        "--actor", type=_actor, default=None,
        help="Who, in the history. Default: cli:USER@HOST of the system user running this command.",
    )  # fmt: skip
    who.add_argument(
        "--user", default=None, metavar="USERNAME",
        help="Act as this Django user: recorded by username, with an entry in the admin's history.",
    )  # fmt: skip


def _add_list(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("--status", choices=JobStatus.values, help="Only jobs in this status.")
    code, name = arguments.matching(CODE_RE, "an error code"), arguments.matching(NAME_RE, "a job type name")
    listing.add_argument("--code", type=code, help="Only jobs whose last error had this code.")
    listing.add_argument("--type", type=name, help="Only jobs of this type.")
    listing.add_argument(
        "--queue", type=arguments.matching(QUEUE_RE, "a queue name"), help="Only jobs of this queue."
    )
    listing.add_argument(
        "--limit", type=_limit, default=50,
        help=f"At most this many, the last enqueued first (default 50, up to {operations.MAX_LISTED}).",
    )  # fmt: skip
    listing.add_argument("--json", action="store_true", help="Print one JSON object per job.")


class Command(BaseCommand):
    help = "Retry, cancel or explain one job, or list the newest jobs by status, error code, type or queue."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        verbs = parser.add_subparsers(
            dest="verb", required=True, metavar="retry|cancel|wake|signal|explain|list|operation"
        )
        _add_action(verbs.add_parser("retry", help="Retry failed, cancelled or parked jobs afresh."), "retry")
        _add_action(
            verbs.add_parser("cancel", help="Cancel pending jobs at once; ask running ones to stop."),
            "cancel",
        )
        _add_durable(verbs)
        explain = verbs.add_parser("explain", help="Say why a job is not running, or what became of it.")
        explain.add_argument("id", type=job_id, help="The job's id.")
        explain.add_argument("--json", action="store_true", help="Print the explanation as JSON.")
        _add_list(verbs.add_parser("list", help="The newest jobs matching every filter given."))
        operation = verbs.add_parser("operation", help="How an action on every matching job goes; stop it.")
        operation.add_argument("id", type=job_id, help="The operation's id.")
        operation.add_argument("--stop", action="store_true", help="Stop it: no further job is acted on.")
        operation.add_argument("--reason", type=_reason, help="Why it is stopped (with --stop).")
        operation.add_argument("--actor", type=_actor, default=None, help="Who stops it (as for retry).")
        operation.add_argument(
            "--user", default=None, metavar="USERNAME", help="Stop it as this Django user."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        verb = options["verb"]
        if verb == "explain":
            write_explanation(self.stdout, options["id"], as_json=options["json"])
        elif verb == "list":
            self._list(options)
        elif verb == "operation":
            self._operation(options)
        elif verb == "wake":
            self._wake(options)
        elif verb == "signal":
            self._signal(options)
        elif options["ids"]:
            if matching.filter_given(options) or options["apply"]:
                raise CommandError("give job ids or filter options, not both")
            self._act(verb, options)
        elif matching.filter_given(options):
            matching.act_on_matching(self.stdout, verb, options, self._actor(options))
        else:
            raise CommandError(f"say which jobs to {verb}: their ids, or filter options such as --status")

    def _operation(self, options: dict[str, Any]) -> None:
        operation = BulkOperation.objects.using(jobs_settings.DATABASE).filter(id=options["id"]).first()
        if operation is None:
            raise CommandError(f"no bulk operation has id {options['id']}")
        if options["stop"]:
            if options["reason"] is None:
                raise CommandError("say why it is stopped: --reason")
            stopped = bulk.stop_operation(operation.id, reason=options["reason"], actor=self._actor(options))
            if not stopped:
                raise CommandError(f"operation {operation.id} had ended already ({operation.state})")
            operation.refresh_from_db()
        matching.write_operation(self.stdout, operation)

    def _act(self, verb: str, options: dict[str, Any]) -> None:
        act = operations.retry if verb == "retry" else operations.cancel
        actor = self._actor(options)
        refused = 0
        for job in options["ids"]:
            try:
                result = act(job, reason=options["reason"], actor=actor)
            except (ActionRefused, JobNotFound) as exc:
                self.stderr.write(f"job {job}: {exc}")
                refused += 1
                continue
            done = f"retried (was {result})" if verb == "retry" else _cancelled(result)
            self.stdout.write(f"job {job}: {done}")
        if refused:
            done = "retried" if verb == "retry" else "cancelled"
            raise CommandError(f"{refused} of {len(options['ids'])} job(s) were not {done}: see above")

    def _wake(self, options: dict[str, Any]) -> None:
        actor, refused = self._actor(options), 0
        for job in options["ids"]:
            try:
                sleep = durable_actions.wake(job, reason=options["reason"], actor=actor)
            except (ActionRefused, JobNotFound) as exc:
                self.stderr.write(f"job {job}: {exc}")
                refused += 1
                continue
            self.stdout.write(f"job {job}: woken (its sleep {sleep!r} ended), due now")
        if refused:
            raise CommandError(f"{refused} of {len(options['ids'])} job(s) were not woken: see above")

    def _signal(self, options: dict[str, Any]) -> None:
        job, name = options["id"], options["name"]
        try:
            stored = durable_actions.send_signal(
                job, name, options["data"], reason=options["reason"], actor=self._actor(options)
            )
        except (InvalidSignal, ActionRefused, JobNotFound) as exc:
            raise CommandError(f"job {job}: {exc}") from None
        if stored:
            self.stdout.write(f"job {job}: signal {name!r} sent")
        else:
            self.stdout.write(f"job {job}: signal {name!r} not stored: one of that name had come already")

    def _actor(self, options: dict[str, Any]) -> operations.Actor:
        if options["user"] is not None:
            user_model = get_user_model()
            try:
                user: operations.Actor = user_model._default_manager.get_by_natural_key(options["user"])
            except user_model.DoesNotExist:
                raise CommandError(f"no Django user is named {options['user']!r}") from None
            return user
        return options["actor"] or f"cli:{operations.default_actor()}"

    def _list(self, options: dict[str, Any]) -> None:
        jobs = operations.newest_jobs(
            status=options["status"], code=options["code"], job_type=options["type"],
            queue=options["queue"], limit=options["limit"],
        )  # fmt: skip
        for job in jobs:
            if options["json"]:
                self.stdout.write(json.dumps(_as_dict(job), ensure_ascii=False))
            else:
                self.stdout.write("\t".join(_row(job)))
        if not jobs and not options["json"]:
            self.stderr.write("no job matches")


def _cancelled(result: str) -> str:
    if result == CancelResult.CANCELLED:
        return "cancelled"
    return "cancellation requested: it stops at its next heartbeat"


def _row(job: Job) -> list[str]:
    # Listed newest first means in the order they were enqueued (ids are drawn as rows are
    # written, and every filter's index is ordered by id), so the time that order follows
    # is printed first; when the job finished, or is due, comes after it.
    when = job.finished_at or job.available_at
    return [
        str(job.id), job.status, job.type, job.queue, f"{job.attempts}/{job.max_attempts}",
        job.last_error_code or "-", _moment(job.created_at), _moment(when),
    ]  # fmt: skip


def _moment(when: datetime | None) -> str:
    return f"{when:%Y-%m-%d %H:%M:%S %Z}" if when else "-"


def _as_dict(job: Job) -> dict[str, Any]:
    return {
        column: value.isoformat() if hasattr(value, "isoformat") else value
        for column in operations.LIST_COLUMNS
        for value in (getattr(job, column),)
    }
