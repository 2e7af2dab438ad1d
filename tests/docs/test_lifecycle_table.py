"""docs/lifecycle.md's table of states says every arrow of the state machine (``states.py``),
and no other: each status's "enters from" and "leaves to" columns, read as written."""

from __future__ import annotations

import re
from pathlib import Path

from django_jobs.states import TRANSITIONS, JobStatus

LIFECYCLE = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"


def table() -> dict[str, tuple[set[str], set[str]]]:
    """Each status's row: (the statuses it enters from, those it leaves to)."""
    rows: dict[str, tuple[set[str], set[str]]] = {}
    for line in LIFECYCLE.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not re.fullmatch(r"`\w+`", cells[0]):
            continue
        status = cells[0].strip("`")
        if status not in JobStatus.values:
            continue
        # "every other state": every status a job can be in after it was claimed.
        every_other = set(JobStatus.values) - {status, JobStatus.WAITING}
        leaves = every_other if cells[3] == "every other state" else set(re.findall(r"`(\w+)`", cells[3]))
        rows[status] = (set(re.findall(r"`(\w+)`", cells[1])), leaves)
    return rows


def test_the_lifecycle_table_names_every_arrow_and_no_other() -> None:
    rows = table()
    assert set(rows) == set(JobStatus.values)
    for status, (enters_from, leaves_to) in rows.items():
        assert leaves_to == set(TRANSITIONS[status]), status
        assert enters_from == {source for source, targets in TRANSITIONS.items() if status in targets}, status
