"""The console, the metrics view, the findings and the diagnosis read through
``django_jobs.reads``: none of them opens a cursor or runs a statement of its own, and none
reaches into another's module for a read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import django_jobs

PACKAGE = Path(django_jobs.__file__).parent
READERS = sorted(
    [
        *(PACKAGE / "console").glob("*.py"),
        PACKAGE / "observe" / "findings.py",
        PACKAGE / "observe" / "diagnosis.py",
        PACKAGE / "observe" / "reasons.py",
        *(PACKAGE / "observe").glob("why_*.py"),
        PACKAGE / "observe" / "views.py",
    ]
)


def _raw_sql(path: Path) -> list[str]:
    """Where the module runs SQL itself: a cursor's ``execute``, ``connections`` or ``.raw()``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in {"execute", "executemany", "raw", "cursor"}:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "django.db":
            found.extend(
                f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if a.name == "connections"
            )
    return found


@pytest.mark.parametrize("path", READERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_console_and_observers_run_no_sql_of_their_own(path: Path) -> None:
    assert _raw_sql(path) == []


def test_the_metrics_view_reads_the_queues_without_the_console() -> None:
    tree = ast.parse((PACKAGE / "observe" / "views.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "django_jobs.reads.queues" in imported
    assert not any(module and module.startswith("django_jobs.console") for module in imported)


def test_the_check_finds_raw_sql_where_there_is_some(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from django.db import connections\n"
        "with connections['default'].cursor() as c:\n    c.execute('SELECT 1')\n"
    )
    assert _raw_sql(sample) == [
        "sample.py:1 imports connections",
        "sample.py:2 .cursor",
        "sample.py:3 .execute",
    ]
