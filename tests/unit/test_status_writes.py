"""Who writes ``Job.status``, read from the source: ``transitions/`` is the only writer, every
arrow it writes is listed here, and the statuses written after an execution come from
:func:`django_jobs.decision.decide` alone.

The checks read the package's syntax trees (and the text of its SQL), so they hold for every
path, including those no other test drives.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "django_jobs"
#: The one writer of state, and the schema's history (which may write whatever it migrates).
WRITERS = ("transitions",)
SKIPPED = ("migrations",)
#: Where the end of an execution is decided: the outcome writer, and the reaper (a package of
#: maintenance services, each of which may be a module of its own).
DECIDERS = ("runtime/outcomes.py", "maintenance/")

# `status = …` as an assignment of a SET clause (never `o.status`, `to_status`, nor a condition
# after WHERE): group 1 is what is written.
_SET_STATUS = re.compile(
    r"\bSET\b(?:(?!\bWHERE\b).)*?(?<![\w.])status\s*=\s*([^,\s]+)", re.IGNORECASE | re.DOTALL
)
_INSERT = re.compile(r"\bINSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)\s*(.*)", re.IGNORECASE | re.DOTALL)
_ORM_WRITES = {"update", "create", "update_or_create", "get_or_create", "bulk_update"}


@dataclass(frozen=True)
class Source:
    path: str  # relative to the package, with forward slashes
    tree: ast.Module

    def under(self, *prefixes: str) -> bool:
        return any(self.path == p or self.path.startswith(p.rstrip("/") + "/") for p in prefixes)


@functools.cache
def sources() -> list[Source]:
    found = []
    for file in sorted(PACKAGE.rglob("*.py")):
        path = file.relative_to(PACKAGE).as_posix()
        found.append(Source(path, ast.parse(file.read_text(), filename=str(file))))
    assert len(found) > 40 and any(s.path == "transitions/execution.py" for s in found)
    return found


def text_of(node: ast.AST, constants: dict[str, str] | None = None) -> str | None:
    """A string literal's text; an f-string's, with ``{}`` for what it interpolates, except a
    module-level string constant of ``constants``, whose text it takes (a column list kept in
    one constant is part of the statement the scan reads)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Name) and constants:
        return constants.get(node.value.id)
    if isinstance(node, ast.JoinedStr):
        return "".join(text_of(v, constants) or "{}" for v in node.values)
    return None


def string_constants(tree: ast.Module) -> dict[str, str]:
    """The module-level names bound to a plain string literal."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


def strings(tree: ast.AST) -> Iterator[tuple[str, str]]:
    """``(owner, text)`` of every string in ``tree``: the owner is the module-level name or
    the function the string belongs to."""

    constants = string_constants(tree) if isinstance(tree, ast.Module) else {}

    def walk(node: ast.AST, owner: str) -> Iterator[tuple[str, str]]:
        if isinstance(node, ast.Expr) and text_of(node.value) is not None:
            return  # a docstring: prose, never run
        text = text_of(node, constants)
        if text is not None:
            yield owner, text
            return
        for child in ast.iter_child_nodes(node):
            name = owner
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = child.name
            elif isinstance(child, ast.Assign) and owner == "<module>":
                name = ",".join(t.id for t in child.targets if isinstance(t, ast.Name)) or owner
            yield from walk(child, name)

    yield from walk(tree, "<module>")


def top_level_items(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses, up to the parenthesis that closes it."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += char
    return [*items, current.strip()]


def inserted_status(text: str) -> list[str]:
    """What each INSERT in ``text`` puts in a ``status`` column (``?`` if it cannot tell)."""
    found = []
    for match in _INSERT.finditer(text):
        columns = [c.strip() for c in match.group(2).split(",")]
        if "status" not in columns:
            continue
        rest = match.group(3).strip()
        values = re.match(r"VALUES\s*\((.*)", rest, re.IGNORECASE | re.DOTALL) or re.match(
            r"SELECT\s+(.*?)\s+FROM\b", rest, re.IGNORECASE | re.DOTALL
        )
        items = top_level_items(values.group(1)) if values else []
        found.append(items[columns.index("status")] if len(items) > columns.index("status") else "?")
    return found


def sql_status_writes(source: Source) -> list[tuple[str, str]]:
    """``(owner, what is written)`` for every status the SQL of ``source`` writes."""
    writes = []
    for owner, text in strings(source.tree):
        writes += [(owner, value) for value in _SET_STATUS.findall(text)]
        writes += [(owner, value) for value in inserted_status(text)]
    return writes


def is_pending(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value == "pending") or (
        isinstance(node, ast.Attribute) and node.attr == "PENDING"
    )


def orm_status_writes(source: Source) -> list[str]:
    """The ORM writes of a status in ``source``: ``.update(status=…)``, ``.create(status=…)``,
    ``Job(status=…)`` (an instance bulk_create inserts), ``x.status = …`` in a function that
    saves, ``save(update_fields=[…"status"…])``, ``setattr(x, "status", …)``. Enqueue's
    ``pending`` of a new job is its own: a job is born pending (``enqueue_rows`` builds the
    instances of the jobs enqueue wrote, or of jobs a test keeps out of the database)."""
    found = []
    enqueue = source.path in ("enqueueing.py", "enqueue_rows.py")
    for function in ast.walk(source.tree):
        if not isinstance(function, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = list(ast.walk(function))
        saves = any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("save", "bulk_update")
            for n in body
        )
        for node in body:
            where = f"{source.path}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and saves:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in targets):
                    found.append(f"{where} assigns .status and saves")
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "setattr" and len(node.args) > 1 and text_of(node.args[1]) == "status":
                found.append(f"{where} setattr(…, 'status', …)")
            for keyword in node.keywords:
                if keyword.arg == "update_fields" and "status" in ast.unparse(keyword.value):
                    found.append(f"{where} save(update_fields=[…'status'…])")
                if name not in _ORM_WRITES and name != "Job":
                    continue
                value: ast.expr | None = keyword.value if keyword.arg == "status" else None
                if keyword.arg is None and isinstance(keyword.value, ast.Dict):  # **{"status": …}
                    for key, item in zip(keyword.value.keys, keyword.value.values, strict=True):
                        if key is not None and text_of(key) == "status":
                            value = item
                if keyword.arg in ("defaults", "create_defaults") and "'status'" in ast.unparse(
                    keyword.value
                ):
                    value = keyword.value
                if value is not None and not (enqueue and is_pending(value)):
                    found.append(f"{where} {name}(status={ast.unparse(value)})")
    return list(dict.fromkeys(found))  # a function's nodes are its module's too


# ---- 1. transitions/ is the only writer of status --------------------------------------------


def test_no_code_outside_transitions_writes_the_status_column() -> None:
    outside = [s for s in sources() if not s.under(*WRITERS, *SKIPPED)]
    orm = [w for s in outside for w in orm_status_writes(s)]
    sql = [f"{s.path} {owner}: status = {value}" for s in outside for owner, value in sql_status_writes(s)]
    assert orm == [] and sql == [], "write status through django_jobs.transitions"


def test_enqueue_inserts_its_jobs_pending_and_nothing_else() -> None:
    """A job is born pending, and the scan sees it (so it would see another status): both
    INSERTs of enqueue, in transitions/enqueue.py, each writing 'pending'."""
    (enqueue,) = [s for s in sources() if s.path == "transitions/enqueue.py"]
    assert sorted(sql_status_writes(enqueue)) == [("_INSERT_MANY", "'pending'"), ("_INSERT_ONE", "'pending'")]


@pytest.mark.parametrize(
    ("code", "caught"),
    [
        ("Job.objects.filter(id=1).update(status='failed')", True),
        ("Job.objects.create(type='t', status=JobStatus.FAILED)", True),
        ("Job.objects.filter(id=1).update(**{'status': 'failed'})", True),
        ("def f(job):\n    job.status = 'failed'\n    job.save()", True),
        ("job.save(update_fields=['status'])", True),
        ("setattr(job, 'status', 'failed')", True),
        ("Job(type='t', status='failed')", True),
        ("Job.objects.filter(status='failed').count()", False),
        ("taskapi.replace(result, status=written)", False),
    ],
)
def test_the_orm_scan_catches_each_way_of_writing_a_status(code: str, caught: bool) -> None:
    assert bool(orm_status_writes(Source("console/example.py", ast.parse(code)))) is caught


@pytest.mark.parametrize(
    ("sql", "written"),
    [
        ("UPDATE django_jobs_job SET status = 'failed' WHERE id = %s", ["'failed'"]),
        ("UPDATE django_jobs_job j SET\n  attempts = 1,\n  status = %(to)s\nWHERE j.id = 1", ["%(to)s"]),
        ("INSERT INTO django_jobs_job (type, status) VALUES (%s, 'failed')", ["'failed'"]),
        ("INSERT INTO django_jobs_job (type, status) SELECT t, 'failed' FROM x", ["'failed'"]),
        ("UPDATE django_jobs_job SET progress = %s WHERE id = %s AND status = 'running'", []),
        ("UPDATE t SET x = CASE WHEN o.status = 'pending' THEN 1 END WHERE j.status = 'running'", []),
        ("INSERT INTO django_jobs_jobevent (job_id, to_status) VALUES (%s, 'failed')", []),
    ],
)
def test_the_sql_scan_catches_each_way_of_writing_a_status(sql: str, written: list[str]) -> None:
    source = Source("console/example.py", ast.parse(f"QUERY = {sql!r}"))
    assert [value for _, value in sql_status_writes(source)] == written


# ---- 2. every arrow transitions/ writes, and where its status comes from ---------------------

#: (module, statement) → the status it writes. A literal is an arrow of its own (the claim, the
#: plain success path, an operator's action); ``o.status`` and ``d.status`` are the statuses of
#: the Outcomes and Recoveries it is given: after an execution, only those.
ARROWS = {
    # A job is born pending (enqueue, enqueue_many).
    ("transitions/enqueue.py", "_INSERT_MANY"): "'pending'",
    ("transitions/enqueue.py", "_INSERT_ONE"): "'pending'",
    ("transitions/execution.py", "_CLAIM_TAIL"): "'running'",
    # Only for outcomes whose status is completed (see _plain_success): the decision's.
    ("transitions/outcomes.py", "_COMPLETE"): "'completed'",
    ("transitions/outcomes.py", "_WRITE_OUTCOMES"): "o.status",
    ("transitions/recovery.py", "_RECOVER"): "d.status",
    ("transitions/operator.py", "_CANCEL_PENDING"): "'cancelled'",
    # A start-by deadline passed: a claimed job at its start (never run: no execution to decide
    # for), or a pending one by the reaper's pass.
    ("transitions/expiry.py", "_EXPIRE_AT_START"): "'cancelled'",
    ("transitions/expiry.py", "_EXPIRE_PENDING"): "'cancelled'",
    # Pending, or waiting for a workflow's step whose barrier is closed (its gate's).
    ("transitions/manual_retry.py", "_MANUAL_RETRY"): "CASE",
    ("transitions/operator.py", "_RESOLVE"): "%(to)s",
    # A workflow's jobs are born pending or waiting; an operator cancels what has not started.
    ("transitions/workflows.py", "_INSERT_MEMBERS"): "r.status",
    ("transitions/workflows.py", "_CANCEL_MEMBERS"): "'cancelled'",
    # The triggers of a member's end: a waiting step made due ('pending', or 'needs_review' for a
    # step a restore hold's release settled whose type cannot reconcile) or stopped
    # ('cancelled', the last of the statement's writes), a stopped one waiting again.
    ("transitions/workflow_triggers.py", "_OPEN"): "'cancelled'",
    ("transitions/workflow_triggers.py", "_REOPENED"): "'waiting'",
    # A restore hold's release: pending stays pending, is parked, or (found done) parked and
    # resolved; a waiting step keeps waiting (its barrier parks it once due if it cannot reconcile).
    ("transitions/restore_release.py", "_SETTLE_NOT_STARTED"): "CASE",
}


def test_every_status_transitions_writes_is_a_known_arrow() -> None:
    """A new status write is a new arrow of the state machine: add it here, with where its
    status comes from. One that hard-codes where an execution ends bypasses decide()."""
    writers = [s for s in sources() if s.under(*WRITERS)]
    written = {(s.path, owner): value for s in writers for owner, value in sql_status_writes(s)}
    assert written == ARROWS
    assert [w for s in writers for w in orm_status_writes(s)] == []  # every arrow is named SQL


# ---- 3. after an execution, the status written is decide()'s ---------------------------------


def decided_names(scope: ast.AST) -> set[str]:
    """Names bound in ``scope`` (not in nested functions) to what ``decide(...)`` returned."""
    names = set()
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "decide"
        ):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


#: The dataclasses transitions/ writes statuses from, and the position of their status field.
STATUS_ARGUMENT = {"Outcome": 2, "Recovery": 1}


def undecided_statuses(source: Source) -> list[str]:
    """Each Outcome or Recovery built in ``source`` with a status that is not ``X.status`` of
    an ``X = decide(...)`` of its own function or of the module; and each copy of one with
    another status."""
    found = []
    module_level = decided_names(ast.Module(body=[n for n in source.tree.body if isinstance(n, ast.Assign)]))
    functions = [n for n in ast.walk(source.tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in [source.tree, *functions]:
        decided = module_level | (decided_names(function) if function is not source.tree else set())
        nested = {
            id(n) for f in ast.walk(function) if f is not function and f in functions for n in ast.walk(f)
        }
        for node in ast.walk(function):
            if id(node) in nested or not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            copies = isinstance(node.func, ast.Name) or (
                isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", None) == "dataclasses"
            )
            if name == "replace" and copies and any(k.arg == "status" for k in node.keywords):
                found.append(f"{source.path}:{node.lineno} replace(…, status=…)")
            if name not in STATUS_ARGUMENT:
                continue
            position = STATUS_ARGUMENT[name]
            given = [k.value for k in node.keywords if k.arg == "status"]
            status = given[0] if given else node.args[position] if len(node.args) > position else None
            if not (
                isinstance(status, ast.Attribute)
                and status.attr == "status"
                and isinstance(status.value, ast.Name)
                and status.value.id in decided
            ):
                shown = ast.unparse(status) if status is not None else "(none)"
                found.append(f"{source.path}:{node.lineno} {name}(status={shown})")
    return found


def test_the_statuses_written_after_an_execution_are_what_decide_answered() -> None:
    everything = sources()
    built = [s for s in everything if any(isinstance(n, ast.Call) and getattr(n.func, "id", None)
                                          in STATUS_ARGUMENT for n in ast.walk(s.tree))]  # fmt: skip
    assert {s.path for s in built} >= {"runtime/outcomes.py"}  # the scan sees the writer
    assert all(s.under(*DECIDERS) for s in built), [s.path for s in built if not s.under(*DECIDERS)]
    assert [w for s in everything if not s.under(*SKIPPED) for w in undecided_statuses(s)] == []


def uses_decide(node: ast.AST) -> bool:
    """``from django_jobs.decision import decide``, or ``decision.decide``."""
    if isinstance(node, ast.ImportFrom):
        return node.module == "django_jobs.decision" and any(a.name == "decide" for a in node.names)
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "decide"
        and getattr(node.value, "id", None) == "decision"
    )


def test_only_the_outcome_writer_and_the_reaper_decide() -> None:
    """One decision per execution: nobody else imports decide() to guess it again (a task's
    status comes from the outcome written, through JobType.on_finished)."""
    deciding = [s for s in sources() if any(uses_decide(node) for node in ast.walk(s.tree))]
    assert [s.path for s in deciding if not s.under(*DECIDERS)] == []
    assert any(s.path == "runtime/outcomes.py" for s in deciding)
    assert any(s.under("maintenance/") for s in deciding), "the reaper decides for lost executions"


@pytest.mark.parametrize(
    ("code", "caught"),
    [
        ("def f(o):\n    return Outcome(o.job_id, o.execution_id, JobStatus.FAILED)", True),
        ("def f(o):\n    return Outcome(job_id=1, execution_id=2, status='failed')", True),
        ("def f(o, d):\n    return Outcome(1, 2, d.status)", True),
        ("def f(o):\n    return dataclasses.replace(o, status='failed')", True),
        ("def f(s):\n    d = decide(s, b)\n    return Outcome(1, 2, d.status)", False),
        (
            "def f(e, s):\n    decision = decide(s, b)\n    return Recovery(e, decision.status, 'x', 1, 'c')",
            False,
        ),
        ("S = decide(s, b)\ndef f():\n    return Outcome(1, 2, S.status)", False),
        ("def g(s):\n    d = decide(s, b)\ndef f():\n    return Outcome(1, 2, d.status)", True),
    ],
)
def test_the_provenance_scan_catches_a_status_that_decide_did_not_give(code: str, caught: bool) -> None:
    assert bool(undecided_statuses(Source("runtime/outcomes.py", ast.parse(code)))) is caught
