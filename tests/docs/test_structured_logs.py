"""docs/workers.md's *Structured logs* shows what JSONFormatter writes and every field it names."""

from __future__ import annotations

import json
import logging
import re
import uuid

from django_jobs.logs import JOB_FIELDS, JSONFormatter, job_fields
from tests.docs.snippets import ROOT, blocks

DOCUMENT = ROOT / "docs" / "workers.md"


def _section() -> str:
    text = DOCUMENT.read_text()
    start = text.index("## Structured logs")
    return text[start : text.index("\n## ", start + 1)]


def test_the_example_lines_are_what_the_formatter_writes() -> None:
    section = _section()
    examples = [b for b in blocks(DOCUMENT) if b.lang == "text" and b.code.strip() in section]
    assert len(examples) == 1
    lines = [json.loads(line) for line in examples[0].code.splitlines()]
    (retry,) = [e for e in lines if "job_id" in e]
    logger = logging.getLogger("django_jobs.outcomes")
    fields = job_fields(
        1041, "billing.charge_invoice", "default", 1, uuid.UUID(retry["execution_id"]), "web-1"
    )
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 1, retry["message"], (), None, extra=fields
    )
    written = json.loads(JSONFormatter().format(record))
    assert list(written) == list(retry), "the example's keys, in the order they are written"
    assert {k: written[k] for k in ("level", "logger", "message", "job_id", "job_type")} == {
        k: retry[k] for k in ("level", "logger", "message", "job_id", "job_type")
    }


def test_the_field_table_names_every_field_and_no_other() -> None:
    table = re.findall(r"^\| `(\w+)` \|", _section(), re.MULTILINE)
    assert sorted(table) == sorted([*JOB_FIELDS, "exception"])
