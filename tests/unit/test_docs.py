from __future__ import annotations

from pathlib import Path

from django_jobs import conf

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_setting_is_documented_where_it_is_defined_and_in_the_docs() -> None:
    page = (DOCS / "configuration.md").read_text()
    for key in conf.DEFAULTS:
        assert f"`{key}`" in page, f"{key} is missing from docs/configuration.md"
        assert f"``{key}``" in (conf.__doc__ or ""), f"{key} is missing from conf.py's docstring"
