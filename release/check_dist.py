"""What `python -m build` made holds the package, the whole package and nothing but the package.

    python release/check_dist.py dist

The wheel must hold every file the checkout has under django_jobs/ (templates, static files,
migrations, py.typed: a file added there without a package-data line fails here), no other
file (no tests, bench, testproject or docs), and metadata that says the version, the licence
and the classifiers pyproject.toml declares. The sdist must hold what a wheel is built from.
"""

from __future__ import annotations

import ast
import email.parser
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
PACKAGE = "django_jobs"
#: Folders of the checkout that are never shipped; named so that a failure says which leaked.
NEVER_SHIPPED = ("tests/", "bench/", "testproject/", "docs/", "release/", ".ci/")
#: What the sdist holds besides the package: what building the wheel reads, and the changelog.
SDIST_FILES = {
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "CHANGELOG.md",
    "PKG-INFO",
    "setup.cfg",
    "MANIFEST.in",
}


def main() -> None:
    dist = Path(sys.argv[1] if len(sys.argv) > 1 else "dist")
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    version = package_version()
    stem = f"{project['name'].replace('-', '_')}-{version}"
    wheel, sdist = dist / f"{stem}-py3-none-any.whl", dist / f"{stem}.tar.gz"
    others = sorted(p.name for p in dist.iterdir() if p not in (wheel, sdist))
    problems = [f"{dist}/ holds {others} besides {wheel.name} and {sdist.name}"] if others else []
    expected = package_files()
    problems += check_wheel(wheel, stem, expected, project, version)
    problems += check_sdist(sdist, stem, expected)
    if problems:
        sys.exit("the distributions are wrong:\n- " + "\n- ".join(problems))
    print(f"{wheel.name}: {describe(expected)}, and its licence; nothing else")
    print(f"{sdist.name}: the same package files, pyproject.toml, README.md, LICENSE, CHANGELOG.md")


def package_version() -> str:
    """django_jobs.__version__, read without importing the package (it needs Django)."""
    tree = ast.parse((CHECKOUT / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]:
            return str(ast.literal_eval(node.value))
    sys.exit(f"{PACKAGE}/__init__.py sets no __version__")


def package_files() -> set[str]:
    """Every file the checkout keeps under django_jobs/: git's list where there is one (so a
    stray local file is not expected), else the tree without Python's caches."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", PACKAGE], cwd=CHECKOUT, capture_output=True, check=True
        ).stdout.decode()
        files = {name for name in listed.split("\0") if name}
    except (OSError, subprocess.CalledProcessError):
        files = set()
    if not files:
        files = {
            path.relative_to(CHECKOUT).as_posix()
            for path in (CHECKOUT / PACKAGE).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }
    return files


def describe(files: set[str]) -> str:
    templates = [f for f in files if "/templates/" in f]
    static = [f for f in files if "/static/" in f]
    migrations = [f for f in files if "/migrations/" in f and not f.endswith("__init__.py")]
    typed = f"{PACKAGE}/py.typed" in files
    return (
        f"{len(files)} files of {PACKAGE}/ ({len(templates)} templates, {len(static)} static files, "
        f"{len(migrations)} migrations{', py.typed' if typed else ''})"
    )


def check_wheel(wheel: Path, stem: str, expected: set[str], project: dict, version: str) -> list[str]:
    if not wheel.is_file():
        return [f"no wheel {wheel}"]
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if not n.endswith("/")}
        info = f"{stem}.dist-info/"
        metadata_text = archive.read(info + "METADATA").decode()
        licence = archive.read(info + "licenses/LICENSE") if info + "licenses/LICENSE" in names else None
    shipped = {n for n in names if n.startswith(f"{PACKAGE}/")}
    problems = [f"the wheel lacks {f}" for f in sorted(expected - shipped)]
    problems += [f"the wheel holds {f}, which the checkout does not keep" for f in sorted(shipped - expected)]
    leaked = sorted(n for n in names if n.startswith(NEVER_SHIPPED))
    problems += [f"the wheel holds {n}" for n in leaked]
    stray = sorted(n for n in names - shipped if not n.startswith(info) and n not in leaked)
    problems += [f"the wheel holds {n}, outside {PACKAGE}/" for n in stray]
    for needed in (f"{PACKAGE}/py.typed", f"{PACKAGE}/migrations/0001_initial.py"):
        if needed not in expected:
            problems.append(f"the checkout has no {needed}")
    if not any("/templates/" in f for f in expected):
        problems.append("the checkout has no templates: is the package where this script looks?")
    dist_info = {n[len(info) :] for n in names if n.startswith(info)}
    wanted = {"METADATA", "WHEEL", "RECORD", "top_level.txt", "licenses/LICENSE"}
    if dist_info != wanted:
        problems.append(f"{info} holds {sorted(dist_info)}, not {sorted(wanted)}")
    if licence != (CHECKOUT / "LICENSE").read_bytes():
        problems.append(f"{info}licenses/LICENSE is not the checkout's LICENSE")
    problems += check_metadata(email.parser.Parser().parsestr(metadata_text), project, version)
    return problems


def check_metadata(metadata: email.message.Message, project: dict, version: str) -> list[str]:
    problems = []
    said = {
        "Name": project["name"],
        "Version": version,
        "License-Expression": project["license"],
        "License-File": "LICENSE",
        "Requires-Python": project["requires-python"],
    }
    for field, value in said.items():
        if metadata.get(field) != value:
            problems.append(f"METADATA {field}: {metadata.get(field)!r}, expected {value!r}")
    if metadata.get_all("Classifier") != project["classifiers"]:
        problems.append(f"METADATA's classifiers {metadata.get_all('Classifier')} are not pyproject.toml's")
    for classifier in ("Typing :: Typed", "Development Status :: 5 - Production/Stable"):
        if classifier not in project["classifiers"]:
            problems.append(f"pyproject.toml lacks the classifier {classifier!r}")
    if not metadata.get_payload().strip():
        problems.append("METADATA has no description (README.md)")
    return problems


def check_sdist(sdist: Path, stem: str, expected: set[str]) -> list[str]:
    if not sdist.is_file():
        return [f"no sdist {sdist}"]
    with tarfile.open(sdist) as archive:
        names = {m.name.removeprefix(f"{stem}/") for m in archive.getmembers() if m.isfile()}
    problems = [f"the sdist lacks {f}" for f in sorted(expected - names)]
    problems += [f"the sdist lacks {f}" for f in sorted(SDIST_FILES - {"setup.cfg", "MANIFEST.in"} - names)]
    problems += [f"the sdist holds {n}" for n in sorted(names) if n.startswith(NEVER_SHIPPED)]
    egg_info = f"{stem.split('-')[0]}.egg-info/"
    others = {n for n in names - expected - SDIST_FILES if not n.startswith(egg_info)}
    problems += [f"the sdist holds {n}, which is not needed" for n in sorted(others)]
    return problems


if __name__ == "__main__":
    main()
