from __future__ import annotations

import argparse
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from django_jobs.maintenance import search_indexes
from django_jobs.reads.search_fields import IndexState, SearchIndex, unused_indexes
from django_jobs.reads.search_fields import search_indexes as declared_indexes
from django_jobs.schema import require_migrated

NONE_DECLARED = "no job type declares a searchable payload field (@job(search=(...)))"


class Command(BaseCommand):
    help = (
        "List the indexes of the payload fields job types declare searchable (@job(search=...)) "
        "and their state; --create builds the missing ones and rebuilds invalid ones, "
        "CONCURRENTLY: the job table stays readable and writable meanwhile."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "fields", nargs="*", metavar="FIELD",
            help="Only these searchable fields. Default: every one the job types declare.",
        )  # fmt: skip
        what = parser.add_mutually_exclusive_group()
        what.add_argument(
            "--create", action="store_true",
            help="Build each missing index and rebuild each invalid one (a build reads the whole "
            "job table: minutes on millions of jobs).",
        )  # fmt: skip
        what.add_argument(
            "--sql", action="store_true",
            help="Print the statements --create would run, and run nothing.",
        )  # fmt: skip
        what.add_argument(
            "--drop-unused", action="store_true",
            help="Drop the search indexes of fields no job type declares searchable any more.",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        require_migrated()
        try:
            if options["drop_unused"]:
                if options["fields"]:
                    raise CommandError("--drop-unused drops every unused search index: name no field")
                self._drop_unused()
                return
            indexes = self._chosen(options["fields"])
            if not indexes and (options["sql"] or options["create"]):
                raise CommandError(NONE_DECLARED)
            if options["sql"]:
                for index in indexes:
                    for statement in search_indexes.statements(index):
                        self.stdout.write(statement + ";")
            elif options["create"]:
                for index in indexes:
                    self._build(index)
            else:
                self._list(indexes)
        except search_indexes.BuildRefused as exc:
            raise CommandError(str(exc)) from None

    def _chosen(self, fields: list[str]) -> list[SearchIndex]:
        indexes = declared_indexes()
        unknown = sorted(set(fields) - {index.field for index in indexes})
        if unknown:
            raise CommandError(
                f"not a searchable field: {', '.join(unknown)} (searchable: "
                + (", ".join(index.field for index in indexes) or "none")
                + ")"
            )
        return [index for index in indexes if not fields or index.field in fields]

    def _list(self, indexes: list[SearchIndex]) -> None:
        if not indexes:
            self.stdout.write(NONE_DECLARED)
        for index in indexes:
            todo = "" if index.state in (IndexState.VALID, IndexState.BUILDING) else "\trun --create"
            self.stdout.write(f"{index.field}\t{index.state}\t{index.name}\t{', '.join(index.types)}{todo}")
        for name in unused_indexes():
            self.stdout.write(f"-\tunused\t{name}\tno job type declares its field\tdrop with --drop-unused")

    def _build(self, index: SearchIndex) -> None:
        if index.state in (IndexState.MISSING, IndexState.INVALID):
            self.stdout.write(f"{index.name}: building (reads the whole job table) …")
            self.stdout.flush()
        started = time.monotonic()
        try:
            done = search_indexes.build(index)
        except DatabaseError as exc:
            raise CommandError(
                f"{index.name}: the build failed ({str(exc).strip()}); an index it left invalid is "
                "rebuilt by the next run"
            ) from None
        took = f" in {time.monotonic() - started:.1f} s" if done in ("created", "rebuilt") else ""
        self.stdout.write(f"{index.name}: {done}{took}")

    def _drop_unused(self) -> None:
        names = unused_indexes()
        for name in names:
            search_indexes.drop(name)
            self.stdout.write(f"{name}: dropped")
        if not names:
            self.stdout.write("no unused search index")
