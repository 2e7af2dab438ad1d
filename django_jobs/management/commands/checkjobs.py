from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand

from django_jobs.observe.findings import find
from django_jobs.schema import require_migrated


class Command(BaseCommand):
    help = (
        "Report old backlogs, queues no live worker serves, stale running jobs and what holds the "
        "vacuum horizon back; exit 1 when a finding is critical, 0 otherwise."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print the findings as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        findings = find()
        if options["json"]:
            self.stdout.write(json.dumps([f.as_dict() for f in findings], indent=2, ensure_ascii=False))
        else:
            for finding in findings:
                self.stdout.write(f"{finding.level.upper()}: {finding.message}")
            if not findings:
                self.stdout.write(
                    "OK: no backlog over its threshold, every busy queue served, no stale job, "
                    "nothing holds vacuum back"
                )
        if any(f.critical for f in findings):
            # An exit status, not an exception: the output above is the report, not an error.
            self.stdout.flush()
            sys.exit(1)
