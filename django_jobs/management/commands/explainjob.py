from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from django_jobs.errors import JobNotFound
from django_jobs.observe.diagnosis import Explanation, explain, parse_job_id
from django_jobs.schema import require_migrated


def job_id(text: str) -> int:
    try:
        return parse_job_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def write_explanation(stdout: OutputWrapper, job: int, *, as_json: bool) -> None:
    """Print why ``job`` is not running (or what became of it); ``CommandError`` if no job has
    the id. Shared by ``explainjob`` and ``jobs explain``."""
    try:
        explanation = explain(job)
    except JobNotFound as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        stdout.write(json.dumps(explanation.as_dict(), indent=2, ensure_ascii=False))
        return
    for line in _lines(explanation):
        stdout.write(line)


def _lines(explanation: Explanation) -> list[str]:
    width = max(len(label) for label, _ in explanation.evidence)
    return [
        f"job {explanation.job_id}: {explanation.reason}",
        explanation.sentence,
        *(f"  {label.ljust(width)}  {value}" for label, value in explanation.evidence),
    ]


class Command(BaseCommand):
    help = "Say why a job is not running (or what became of it), with the evidence."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("id", type=job_id, help="The job's id.")
        parser.add_argument("--json", action="store_true", help="Print the explanation as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        write_explanation(self.stdout, options["id"], as_json=options["json"])
