"""The package's layers, read from its source: import arrows point down, and modules stay short.

The layers, lowest first (``docs/architecture.md`` draws them): the pure rules (no database, no
models), ``conf``; the registry (with ``job_types`` and ``handlers``); the models;
``transitions/`` (the only writer of state); enqueue and effects; ``runtime/`` and
``maintenance/``; ``observe/``, ``console/``, ``tasks_framework/`` and ``selftest/``; the
management commands and the public faces.

What counts as an import, and why:

- every ``import`` and ``from … import`` statement of a module, at module level or inside a
  function: an import deferred into a function still runs, and still ties the two modules;
- except those under ``if TYPE_CHECKING:``, which never run (they name types for mypy only);
- ``from django_jobs.x import y`` imports ``django_jobs.x.y`` when that is a module, else
  ``django_jobs.x``; importing ``django_jobs.a.b`` also runs ``django_jobs/a/__init__.py``, so
  it counts as an import of ``django_jobs.a`` too, unless the importer is inside ``a`` (Python
  has started that package already); the root ``django_jobs/__init__.py`` is left out of that
  rule, since Python runs it before any module of the package whoever imports.

Long modules: a module over ``MAX_LINES`` lines says why at the top of its docstring, on a line
that starts ``Over 300 lines:`` (e.g. ``Over 300 lines: the claim's SQL is one statement whose
parts must be read together.``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import django_jobs

ROOT = "django_jobs"
PACKAGE = Path(django_jobs.__file__).resolve().parent

#: The rules that need no database: they may import each other and ``conf``, nothing else of
#: the package.
PURE_RULES = frozenset(
    f"{ROOT}.{name}"
    for name in (
        "errors",
        "states",
        "decision",
        "backoff",
        "limits",
        "schedules",
        "jsonvalues",
        "sanitize",
        "results",
        "names",
        "restoring",
        "workflow_plan",
        "durable_rules",
    )
)
CONF = f"{ROOT}.conf"
REGISTRY = f"{ROOT}.registry"
#: The modules carved from the registry (a job type and its policy; what a handler is): as low
#: as the registry, and held to the same rule.
REGISTRY_PARTS = frozenset({f"{ROOT}.job_types", f"{ROOT}.handlers"})

#: The layers above ``transitions/``: nothing in ``transitions/`` or in the pure rules reaches
#: into them.
UPPER_LAYERS = tuple(
    f"{ROOT}.{name}"
    for name in ("runtime", "console", "observe", "maintenance", "tasks_framework", "selftest")
)

#: What a pure rule may take from ``django.db.models``: the enumerations, which need no app
#: registry and no database (``states`` builds its statuses on ``TextChoices``).
CHOICES = frozenset({"TextChoices", "IntegerChoices", "Choices"})

MAX_LINES = 300
REASON = "Over 300 lines:"


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.target}"


@cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name, packages under their own name. Migrations are
    left out: they are frozen history, written by ``makemigrations``, and import only models."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def _under_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run, wherever they are; not those under TYPE_CHECKING."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _under_type_checking(node):
            for child in node.orelse:
                yield from _statements(ast.Module(body=[child], type_ignores=[]))
        else:
            yield from _statements(node)


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _with_parents(importer: str, target: str) -> Iterator[str]:
    """``target`` and the packages Python runs to reach it (see the module's docstring)."""
    yield target
    parts = target.split(".")
    for end in range(len(parts) - 1, 1, -1):
        parent = ".".join(parts[:end])
        if importer != parent and not importer.startswith(parent + "."):
            yield parent


@cache
def all_imports(importer: str) -> tuple[Import, ...]:
    """Everything ``importer`` imports, of the package or outside it."""
    tree = ast.parse(modules()[importer].read_text(), filename=str(modules()[importer]))
    found: list[Import] = []
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            source = _absolute(importer, node)
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules() else source
                for alias in node.names
            ]
        for target in targets:
            if target == ROOT or target.startswith(ROOT + "."):
                found.extend(Import(importer, name, node.lineno) for name in _with_parents(importer, target))
            else:
                found.append(Import(importer, target, node.lineno))
    return tuple(dict.fromkeys(found))


def package_imports(importer: str) -> list[Import]:
    return [i for i in all_imports(importer) if i.target in modules() and i.target != importer]


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def import_circles() -> list[list[str]]:
    """The strongly connected groups of the import graph with more than one module (Tarjan)."""
    graph = {name: sorted({i.target for i in package_imports(name)}) for name in modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for name in graph:
        if name not in index:
            visit(name)
    return circles


def test_the_reader_of_imports_sees_deferred_and_relative_imports_but_not_type_only_ones() -> None:
    # The registry names the job context for mypy only, and the package's face imports lazily.
    assert not any(
        i.target.startswith(f"{ROOT}.runtime")
        for name in REGISTRY_PARTS | {REGISTRY}
        for i in package_imports(name)
    )
    assert f"{ROOT}.enqueueing" in {i.target for i in package_imports(ROOT)}
    # A submodule's import runs its package: models.jobs → transitions.claimable → transitions.
    assert {f"{ROOT}.transitions.claimable", f"{ROOT}.transitions"} <= {
        i.target for i in package_imports(f"{ROOT}.models.jobs")
    }
    assert {f"{ROOT}.models.audit", f"{ROOT}.models.jobs"} <= {
        i.target for i in package_imports(f"{ROOT}.models")
    }


def test_no_module_of_the_package_imports_itself_back_through_others() -> None:
    circles = import_circles()
    assert circles == [], "import circles: " + "; ".join(" ↔ ".join(circle) for circle in circles)


def test_pure_rules_import_only_pure_rules_conf_and_no_models() -> None:
    allowed = PURE_RULES | {CONF}
    wrong = []
    for name in sorted(PURE_RULES):
        for i in all_imports(name):
            if (
                (within(i.target, (ROOT,)) and i.target not in allowed)
                or (i.target.endswith(".models") and i.target != "django.db.models")
                or i.target == "django.apps"
            ):
                wrong.append(str(i))
        wrong.extend(f"{name} uses django.db.models.{use}" for use in _model_uses(name) if use not in CHOICES)
    assert wrong == []


def _model_uses(name: str) -> set[str]:
    """The names a module takes from ``django.db.models``, imported or reached as attributes."""
    tree = ast.parse(modules()[name].read_text())
    uses: set[str] = set()
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "django.db.models":
            uses.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "django.db":
            aliases.update(alias.asname or alias.name for alias in node.names if alias.name == "models")
        elif isinstance(node, ast.Import):
            uses.update("*" for alias in node.names if alias.name.startswith("django.db.models"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            uses.add(node.attr)
    return uses


def test_transitions_and_pure_rules_import_nothing_of_the_layers_above() -> None:
    lower = [n for n in modules() if n in PURE_RULES or within(n, (f"{ROOT}.transitions",))]
    wrong = [
        str(i) for name in sorted(lower) for i in package_imports(name) if within(i.target, UPPER_LAYERS)
    ]
    assert wrong == []


def test_the_registry_imports_only_pure_rules_and_conf() -> None:
    # Its parts may import each other (a job type names its handler's type), not the registry.
    allowed = PURE_RULES | REGISTRY_PARTS | {CONF, ROOT}
    low = sorted(REGISTRY_PARTS | {REGISTRY})
    assert [str(i) for name in low for i in package_imports(name) if i.target not in allowed] == []


def test_the_transitions_read_the_registry_only_through_their_arguments() -> None:
    # The claim's filter is built from inputs the caller assembles from the registry, so the
    # layer that writes state does not depend on which handlers this process loaded.
    transitions = [n for n in modules() if within(n, (f"{ROOT}.transitions",))]
    registry = REGISTRY_PARTS | {REGISTRY}
    assert [str(i) for name in transitions for i in package_imports(name) if i.target in registry] == []


def _has_reason(path: Path) -> bool:
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return any(line.strip().startswith(REASON) for line in docstring.splitlines())


def test_a_module_over_300_lines_says_why() -> None:
    long = {name: path for name, path in modules().items() if len(path.read_text().splitlines()) > MAX_LINES}
    assert sorted(name for name, path in long.items() if not _has_reason(path)) == [], (
        f"over {MAX_LINES} lines, no line starting {REASON!r} at the top: split it by role or say why"
    )


#: The bands of docs/architecture.md above ``transitions/``, lowest first: a module of a band
#: imports nothing of the bands above it (the packages of one band may import each other).
BANDS = (
    (f"{ROOT}.reads",),
    (f"{ROOT}.observe",),
    tuple(
        f"{ROOT}.{name}"
        for name in ("enqueueing", "enqueue_options", "enqueue_rows", "effects", "workflows", "durable")
    ),
    (f"{ROOT}.runtime", f"{ROOT}.maintenance"),
    (f"{ROOT}.console", f"{ROOT}.tasks_framework", f"{ROOT}.selftest"),
)
#: The one arrow up, on purpose (docs/architecture.md says why): the reaper's pass delivers the
#: admin-log entries the console's audit still owes.
UPWARD = frozenset({(f"{ROOT}.maintenance.reaper", f"{ROOT}.console.audit")})


def upward_imports() -> list[str]:
    wrong = []
    for level, band in enumerate(BANDS):
        above = tuple(prefix for higher in BANDS[level + 1 :] for prefix in higher)
        for name in sorted(n for n in modules() if within(n, band)):
            for i in package_imports(name):
                # Importing `console.audit` runs the `console` package's face: the same arrow.
                allowed = {(name, i.target), (name, i.target + ".audit")} & UPWARD
                if within(i.target, above) and not allowed:
                    wrong.append(str(i))
    return wrong


def test_each_band_imports_nothing_of_the_bands_above_it() -> None:
    assert upward_imports() == []


def test_the_one_arrow_up_is_still_there() -> None:
    # Once it goes, UPWARD must go too, so the exception cannot outlive its reason.
    for importer, target in UPWARD:
        assert target in {i.target for i in package_imports(importer)}
