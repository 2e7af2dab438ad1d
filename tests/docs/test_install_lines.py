"""Every ``pip install`` of django_jobs in README.md and docs/ installs one distribution, the one
pyproject.toml builds, from where it can be had today: a checkout or a wheel built from it
(``django-jobs`` on PyPI is an unrelated project)."""

from __future__ import annotations

import re

import pytest

import django_jobs
from tests.docs.snippets import CHECKOUT, DISTRIBUTION, DOCUMENTS, ROOT

#: The wheel `python -m build` makes in the checkout's dist/, named from the checkout or by its path.
_WHEEL_NAME = rf"{DISTRIBUTION.replace('-', '_')}-(?P<version>[\w.]+)-py3-none-any\.whl"
WHEEL = re.compile(rf"^(?:{re.escape(CHECKOUT)}/)?dist/{_WHEEL_NAME}$")
#: What a reader may install besides django_jobs itself, each named by its own distribution
#: (build: the tool that makes the wheel).
OTHER_DISTRIBUTIONS = ("django-tasks", "prometheus-client", "django-health-check", "build")
_PIP_INSTALL = re.compile(r"pip install ((?:'[^']*'|\"[^\"]*\"|[^\s`'\"]+))")


def install_targets() -> list[tuple[str, str]]:
    """(document:line, what is installed) for every ``pip install`` the documents show."""
    found = []
    for document in DOCUMENTS:
        for number, line in enumerate(document.read_text().splitlines(), 1):
            for match in _PIP_INSTALL.finditer(line):
                found.append((f"{document.relative_to(ROOT)}:{number}", match[1].strip("'\"")))
    return found


def is_this_product(target: str) -> bool:
    base = target.split("[", 1)[0]
    return base == CHECKOUT or bool(WHEEL.match(base))


def test_the_distribution_is_not_the_unrelated_project_on_pypi() -> None:
    assert DISTRIBUTION == "django-jobs-pg"


@pytest.mark.parametrize(("where", "target"), install_targets())
def test_every_install_line_names_the_distribution_pyproject_builds(where: str, target: str) -> None:
    if target.split("[", 1)[0].split(">", 1)[0].split("=", 1)[0] in OTHER_DISTRIBUTIONS:
        return  # a dependency, installed by its own name
    # The product by its name alone (as an extra of it) only works once it is published: until
    # then each line installs the checkout or a wheel built from it.
    assert is_this_product(target), f"{where}: pip install {target} (use {CHECKOUT} or its wheel)"


def test_the_quickstart_installs_the_checkout() -> None:
    quickstart = [t for w, t in install_targets() if w.startswith("docs/quickstart.md")]
    assert CHECKOUT in quickstart


def test_every_wheel_line_names_this_version() -> None:
    wheels = [(w, WHEEL.match(t.split("[", 1)[0])) for w, t in install_targets()]
    versions = {where: match["version"] for where, match in wheels if match}
    assert versions, "no document says how to install the built wheel"
    assert set(versions.values()) == {django_jobs.__version__}, versions
