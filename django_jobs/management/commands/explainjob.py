from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_jobs.diagnosis import JobNotFound, explain, parse_job_id
from django_jobs.schema import require_migrated


def job_id(text: str) -> int:
    try:
        return parse_job_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = "Say why a job is not running (or what became of it), with the evidence."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("id", type=job_id, help="The job's id.")
        parser.add_argument("--json", action="store_true", help="Print the explanation as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        try:
            explanation = explain(options["id"])
        except JobNotFound as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps(explanation.as_dict(), indent=2, ensure_ascii=False))
            return
        self.stdout.write(f"job {explanation.job_id}: {explanation.reason}")
        self.stdout.write(explanation.sentence)
        width = max(len(label) for label, _ in explanation.evidence)
        for label, value in explanation.evidence:
            self.stdout.write(f"  {label.ljust(width)}  {value}")
