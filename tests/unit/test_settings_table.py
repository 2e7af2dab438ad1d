"""The table of settings in ``django_jobs.conf`` is the one source of ``DEFAULTS``, of
``jobs_settings``, of the per-setting system checks and of docs/configuration.md's table.

``python -m tests.unit.test_settings_table`` rewrites that table of the docs from the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_jobs import conf
from django_jobs.conf import DEFAULTS, TABLE, Settings, jobs_settings
from django_jobs.setting import Setting, markdown_table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
HEADER = "| key | default | meaning |"
REGENERATE = "python -m tests.unit.test_settings_table"


def documented_table(page: str) -> str:
    """The settings table of ``page``: its header and the rows that follow it."""
    lines = page.splitlines(keepends=True)
    start = lines.index(HEADER + "\n")
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[start:end])


def rewrite(page: str) -> str:
    return page.replace(documented_table(page), markdown_table(TABLE), 1)


def test_the_docs_table_is_the_one_generated_from_the_settings_table() -> None:
    documented = documented_table(PAGE.read_text())
    assert documented == markdown_table(TABLE), (
        f"docs/configuration.md's table of settings differs from django_jobs/conf.py: "
        f"edit the setting in conf.py, then run `{REGENERATE}` to rewrite the page's table"
    )


def test_rewriting_the_page_changes_only_its_table() -> None:
    page = PAGE.read_text()
    stale = page.replace("| `BATCH_SIZE` | `100` |", "| `BATCH_SIZE` | `7` |")
    assert stale != page
    assert rewrite(stale) == rewrite(page)
    assert documented_table(rewrite(stale)) == markdown_table(TABLE)


@pytest.mark.parametrize("setting", TABLE, ids=lambda s: s.name)
def test_every_setting_has_a_doc_and_a_default_its_own_rule_accepts(setting: Setting[Any]) -> None:
    assert setting.doc.strip().endswith((".", ")")), f"{setting.name} has no sentence of doc"
    assert setting.problems(setting.default) == []


@pytest.mark.parametrize("setting", [s for s in TABLE if s.rule is not None], ids=lambda s: s.name)
def test_every_rule_refuses_a_value_of_no_kind_with_a_stable_check_id(setting: Setting[Any]) -> None:
    problems = setting.problems(object())
    assert problems, f"{setting.name}'s rule accepts anything"
    assert all(p.id.startswith("django_jobs.E0") for p in problems)
    assert all(p.message.startswith(f"DJANGO_JOBS[{setting.name!r}]") for p in problems)


def test_defaults_and_the_typed_attributes_all_come_from_the_table() -> None:
    names = [s.name for s in TABLE]
    assert len(names) == len(set(names))
    assert list(DEFAULTS) == names
    public = [name for name in vars(Settings) if not name.startswith("_")]
    assert public == names, "a setting of jobs_settings is declared outside the table"
    assert all(isinstance(vars(Settings)[name], Setting) for name in public)


def test_the_only_credential_is_the_metrics_token() -> None:
    assert frozenset({"METRICS_TOKEN"}) == conf.CREDENTIAL_SETTINGS


def test_unset_settings_read_as_their_defaults_in_their_types() -> None:
    with override_settings(DJANGO_JOBS={}):
        assert jobs_settings.POLL_INTERVAL == 1.0 and isinstance(jobs_settings.POLL_INTERVAL, float)
        assert jobs_settings.BATCH_SIZE == 100
        assert jobs_settings.QUEUES is None
        assert jobs_settings.METRICS_TOKEN is None
        patterns, retention = jobs_settings.SENSITIVE_PAYLOAD_KEYS, jobs_settings.RETENTION
        assert patterns == DEFAULTS["SENSITIVE_PAYLOAD_KEYS"] and isinstance(patterns, tuple)
        assert retention == DEFAULTS["RETENTION"] and retention is not DEFAULTS["RETENTION"]
        assert jobs_settings.LIVENESS_STALL_LIMIT == 30.0  # 3 × 10 s, at least 30


def test_settings_are_read_when_used_so_override_settings_applies() -> None:
    with override_settings(DJANGO_JOBS={"POLL_INTERVAL": 3, "QUEUES": ["a", "b"], "HEARTBEAT_INTERVAL": 20}):
        assert jobs_settings.POLL_INTERVAL == 3.0 and isinstance(jobs_settings.POLL_INTERVAL, float)
        queues = jobs_settings.QUEUES
        assert queues == frozenset({"a", "b"})
        assert jobs_settings.LIVENESS_STALL_LIMIT == 60.0  # derived from the overridden interval
        assert jobs_settings.LIVENESS_STUCK_LIMIT == 20.0
    with override_settings(DJANGO_JOBS={"RETENTION": {"failed": 60}, "TCP_KEEPALIVES_COUNT": None}):
        assert jobs_settings.RETENTION["failed"] == 60.0
        assert jobs_settings.RETENTION["completed"] == DEFAULTS["RETENTION"]["completed"]
        assert jobs_settings.TCP_KEEPALIVES_COUNT is None


def test_a_django_jobs_that_is_not_a_dict_reads_as_the_defaults() -> None:
    with override_settings(DJANGO_JOBS="not a dict"):
        assert jobs_settings.DATABASE == "default"
        assert jobs_settings.LEASE_TIMEOUT == 60.0


if __name__ == "__main__":
    PAGE.write_text(rewrite(PAGE.read_text()))
    print(f"rewrote the table of settings in {PAGE}")
