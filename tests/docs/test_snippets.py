"""Every Python block of README.md and docs/ runs as written, imports included.

A failing block is reported by its document and line (the test id, and the traceback's lines,
are the document's own).
"""

from __future__ import annotations

import builtins
import dis
import types
import unittest
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from django_jobs.registry import registry
from django_jobs.signals import job_enqueued, job_finished, job_started
from tests.docs.snippets import PYTHON, ROOT, SHELL, Block, all_blocks, python_blocks

BLOCKS = python_blocks()
#: The quickstart's snippets are steps of one session, each after the previous one and a
#: worker's run: tests/docs/test_quickstart.py runs them in order, in the quickstart's project.
SEQUENCES = ("quickstart.md",)
SNIPPETS = [b for b in BLOCKS if b.file is None and b.not_run_reason is None and b.path.name not in SEQUENCES]
SETTINGS = [b for b in BLOCKS if b.file is not None and b.file.endswith("settings.py")]
FILES = [b for b in BLOCKS if b.file is not None and b not in SETTINGS]
NOT_RUN = [b for b in BLOCKS if b.not_run_reason is not None]
KNOWN_LANGUAGES = (*PYTHON, *SHELL, "sql", "text", "ini")
#: The example app's files live in the test project under this folder.
EXAMPLE_APP_ROOT = ROOT / "testproject"


def test_the_documents_have_blocks_to_run() -> None:
    # A broken extraction would otherwise pass by running nothing.
    assert len(SNIPPETS) >= 10 and FILES and SETTINGS
    assert {b.path.name for b in SNIPPETS} >= {"README.md", "idempotency.md", "writing-jobs.md"}


def test_blocks_that_do_not_run_are_few_and_say_why() -> None:
    assert len(NOT_RUN) <= 2, [str(b) for b in NOT_RUN]
    for block in NOT_RUN:
        assert len(block.not_run_reason or "") >= 20, f"{block}: say why it cannot run"


def test_every_code_block_names_its_language() -> None:
    # A block is run, compared or skipped by its language: a Python block without one would
    # silently escape this test. Diagrams are "text".
    unknown = [f"{b} ({b.lang or 'none'})" for b in all_blocks() if b.lang not in KNOWN_LANGUAGES]
    assert not unknown, f"code blocks without a known language: {unknown}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("block", SNIPPETS, ids=str)
@pytest.mark.usefixtures("example_app_as_in_the_docs")
def test_snippet_runs_as_written(block: Block) -> None:
    registered = set(registry.names())
    namespace: dict[str, Any] = {"__name__": f"docs_snippet_{block.path.stem}_{block.line}"}
    try:
        exec(block.compiled(), namespace)
        assert_every_name_resolves(block, namespace)
        for name, value in list(namespace.items()):
            # A snippet that shows a test is run as one: a test function, or a TestCase.
            if name.startswith("test_") and isinstance(value, types.FunctionType):
                value()
            elif _test_case_of(value, namespace):
                run_test_case(block, value)
    finally:
        for name in set(registry.names()) - registered:
            registry.unregister(name)
        # Receivers a snippet connected listen to its own jobs only.
        for signal in (job_enqueued, job_started, job_finished):
            for value in namespace.values():
                if isinstance(value, types.FunctionType):
                    signal.disconnect(value)


def _test_case_of(value: object, namespace: dict[str, Any]) -> bool:
    """A TestCase the snippet defines (not one it imports)."""
    return (
        isinstance(value, type)
        and issubclass(value, unittest.TestCase)
        and value.__module__ == namespace["__name__"]
    )


def run_test_case(block: Block, case: type[unittest.TestCase]) -> None:
    result = unittest.TestResult()
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    suite.run(result)
    problems = [f"{test}:\n{trace}" for test, trace in [*result.errors, *result.failures]]
    assert not problems, f"{block}: {case.__name__} failed:\n" + "\n".join(problems)
    assert result.testsRun, f"{block}: {case.__name__} has no test"


@pytest.mark.parametrize("block", SETTINGS, ids=str)
def test_settings_block_passes_the_system_checks(block: Block) -> None:
    # What `django-admin startproject` writes, for a block that adds to it.
    namespace: dict[str, Any] = {"INSTALLED_APPS": list(settings.INSTALLED_APPS), "DATABASES": {}}
    exec(block.compiled(), namespace)
    if "INSTALLED_APPS" in block.code:
        assert "django_jobs" in namespace["INSTALLED_APPS"], f"{block}: django_jobs is not installed"
    jobs_settings = namespace.get("DJANGO_JOBS")
    if jobs_settings is not None:
        with override_settings(DJANGO_JOBS=jobs_settings):
            # W008 is about job types (those other tests register for themselves), not settings.
            found = [m for m in run_checks() if m.id and m.id.startswith("django_jobs.")]
            problems = [m for m in found if m.id != "django_jobs.W008"]
        assert not problems, f"{block}: {problems}"


@pytest.mark.parametrize("block", FILES, ids=str)
def test_file_block_is_the_example_apps_file(block: Block) -> None:
    assert block.file is not None
    real = EXAMPLE_APP_ROOT / block.file
    assert real.exists(), f"{block} shows {block.file}, which the test project does not have"
    assert block.body == real.read_text(), f"{block} differs from {real.relative_to(ROOT)}"


def assert_every_name_resolves(block: Block, namespace: dict[str, Any]) -> None:
    """Names used inside the snippet's functions exist: a forgotten import fails here even when
    the function is never called."""
    missing = sorted(
        {
            name
            for code in _code_objects(block.compiled())
            for name in _globals_read(code)
            if name not in namespace and not hasattr(builtins, name)
        }
    )
    assert not missing, f"{block}: names never imported or defined: {', '.join(missing)}"


def _code_objects(code: Any) -> list[types.CodeType]:
    found = [code]
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found.extend(_code_objects(constant))
    return found


def _globals_read(code: types.CodeType) -> set[str]:
    return {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
