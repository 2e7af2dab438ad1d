"""The fenced code blocks of README.md and docs/**/*.md, so tests can run them as a reader would.

A Python block is one of:

- a file of the example app or of the reader's settings, when its first line names it
  (``# shop/jobs.py``, ``# mysite/settings.py``);
- a block a reader cannot run as written, when its first line says so and why
  (``# not run: …``); such blocks are few, and a test keeps them so;
- otherwise, a snippet that runs as written, imports included, against the test project.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: The distribution pyproject.toml builds, and where the documents say its checkout is.
DISTRIBUTION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
CHECKOUT = f"/path/to/{DISTRIBUTION}"

PYTHON = ("python", "py")
SHELL = ("sh", "bash", "console", "shell")

_FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_FILE_MARKER = re.compile(r"^# (?P<path>[\w./-]+\.py)\b")
NOT_RUN = "# not run:"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def __str__(self) -> str:
        return self.where

    @property
    def first_line(self) -> str:
        return self.code.split("\n", 1)[0].strip()

    @property
    def file(self) -> str | None:
        """The file this block shows (``shop/jobs.py``), or None for a snippet."""
        match = _FILE_MARKER.match(self.first_line)
        return match["path"] if match else None

    @property
    def body(self) -> str:
        """The code without the line that names its file."""
        return self.code.split("\n", 1)[1] if self.file else self.code

    @property
    def not_run_reason(self) -> str | None:
        first = self.first_line
        return first[len(NOT_RUN) :].strip() if first.startswith(NOT_RUN) else None

    def compiled(self) -> object:
        """The code compiled so that tracebacks point at the document's own lines."""
        return compile("\n" * self.line + self.code, str(self.path), "exec")


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, start = opening["fence"], i
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            i += 1
        if i == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{start + 1}: code block never closed")
        found.append(Block(path, start + 1, opening["lang"].lower(), "\n".join(lines[start + 1 : i]) + "\n"))
        i += 1
    return found


def all_blocks() -> list[Block]:
    return [block for document in DOCUMENTS for block in blocks(document)]


def python_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.lang in PYTHON]


def documented_logging() -> dict[str, object]:
    """The ``LOGGING`` of docs/workers.md's *Structured logs*, as its block defines it."""
    document = ROOT / "docs" / "workers.md"
    found = [b for b in blocks(document) if b.file == "settings.py" and "LOGGING = " in b.code]
    assert len(found) == 1, f"{document.name}: expected one settings block with LOGGING, found {len(found)}"
    namespace: dict[str, object] = {}
    exec(found[0].compiled(), namespace)
    config = namespace["LOGGING"]
    assert isinstance(config, dict)
    return config
