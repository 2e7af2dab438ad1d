"""The version is written once, and the changelog has its entry.

    python release/check_version.py

django_jobs.__version__ is the version; pyproject.toml takes it from there (a dynamic version,
not a second copy). CHANGELOG.md, in Keep a Changelog form, opens with an [Unreleased] section
and then the entry of this version, dated, with something in it; the versions below it are
older.
"""

from __future__ import annotations

import re
import sys
import tomllib

from check_dist import CHECKOUT, package_version

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$", re.MULTILINE)


def main() -> None:
    version = package_version()
    problems = []
    if not SEMVER.match(version):
        problems.append(f"__version__ {version!r} is not MAJOR.MINOR.PATCH")
    pyproject = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())
    if "version" in pyproject["project"] or "version" not in pyproject["project"].get("dynamic", []):
        problems.append("pyproject.toml must not write the version: dynamic = ['version']")
    source = pyproject.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version")
    if source != {"attr": "django_jobs.__version__"}:
        problems.append(f"pyproject.toml takes the version from {source}, not django_jobs.__version__")
    problems += check_changelog((CHECKOUT / "CHANGELOG.md").read_text(), version)
    if problems:
        sys.exit("the version is not ready for release:\n- " + "\n- ".join(problems))
    print(f"version {version}: django_jobs.__version__, pyproject.toml and CHANGELOG.md agree")


def check_changelog(text: str, version: str) -> list[str]:
    headings = list(HEADING.finditer(text))
    names = [h["name"] for h in headings]
    if names[:2] != ["Unreleased", version]:
        return [f"CHANGELOG.md's first entries are {names[:2]}, not ['Unreleased', {version!r}]"]
    problems = []
    entry = headings[1]
    if not entry["date"]:
        problems.append(f"CHANGELOG.md's [{version}] has no date (## [{version}] - YYYY-MM-DD)")
    body = text[entry.end() : headings[2].start() if len(headings) > 2 else len(text)]
    if not re.search(r"^- ", body, re.MULTILINE):
        problems.append(f"CHANGELOG.md's [{version}] lists no change")
    older = [tuple(int(p) for p in n.split(".")) for n in names[1:] if SEMVER.match(n)]
    if older != sorted(older, reverse=True) or len(older) != len(names) - 1:
        problems.append(f"CHANGELOG.md's versions are not newest first, each MAJOR.MINOR.PATCH: {names[1:]}")
    return problems


if __name__ == "__main__":
    main()
