"""docs/architecture.md names real modules and functions, and tells the trip of a payload in order."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()

#: The trip of a payload, as the page tells it: each names a function that exists, in this order.
TRIP = (
    "django_jobs.enqueueing.enqueue",
    "transitions.enqueue.insert",
    "runtime.listener.Listener",
    "transitions.claim",
    "runtime.pool.ExecutorPool.submit",
    "runtime.executor.execute",
    "runtime.context.JobContext",
    "handler(ctx, payload)",
    "runtime.outcomes.record",
    "decision.decide",
    "transitions.write_outcomes",
    "runtime.outcomes.announce",
)


def _resolve(dotted: str) -> object:
    parts = dotted.removeprefix("django_jobs.").split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module("django_jobs." + ".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[end:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def test_every_module_the_page_names_exists() -> None:
    named = set(re.findall(r"`([a-z_/]+\.py)`", PAGE))
    bases = (ROOT / "django_jobs", ROOT)
    assert sorted(path for path in named if not any((base / path).exists() for base in bases)) == []


def test_the_picture_of_the_layers_names_every_package_and_its_modules() -> None:
    picture = PAGE[PAGE.index("```text") : PAGE.index("```", PAGE.index("```text") + 3)]
    package = ROOT / "django_jobs"
    for folder in sorted(p for p in package.iterdir() if (p / "__init__.py").exists()):
        if folder.name in ("migrations", "management", "templatetags"):
            continue
        assert f"{folder.name}/" in picture, folder.name
        for module in sorted(folder.glob("*.py")):
            if module.stem != "__init__":
                assert re.search(rf"\b{module.stem}\b", picture), f"{folder.name}/{module.name}"


@pytest.mark.parametrize("name", [step for step in TRIP if "(" not in step])
def test_each_step_of_the_trip_names_what_exists(name: str) -> None:
    assert callable(_resolve(name))


def test_the_trip_is_told_in_order() -> None:
    trip = PAGE[PAGE.index("## The trip of a payload") : PAGE.index("## Which module to open")]
    places = [trip.find(f"`{step}") for step in TRIP]
    assert -1 not in places, [step for step, place in zip(TRIP, places, strict=True) if place < 0]
    assert places == sorted(places)
