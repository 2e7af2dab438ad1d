"""Install the built wheel into a fresh virtualenv outside the checkout and use it as a project
would: migrate, enqueue, run a worker, open the console, check, self-test.

    python release/smoke.py dist/django_jobs_pg-1.0.0-py3-none-any.whl \\
        --python python3.11 --django 'django>=5.2,<6.0' --extra tasks

An editable install (or a test run from the checkout) finds every template and migration in
the source tree; a project that installed the wheel has only what the wheel holds. So the
project here is a scratch one (release/smoke_project, copied to a temporary directory), every
command runs from that directory with nothing of the checkout on its path, and the first
check is that django_jobs is imported from the virtualenv, installed from the wheel.

It creates a database of its own on the server of --server (DATABASE_URL's by default) and
drops it at the end. Only the standard library: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
PROJECT = Path(__file__).resolve().parent / "smoke_project"
#: Each step's commands, as a user types them (the smoke steps are smokeapp's command).
STEPS: list[tuple[str, list[str]]] = [
    ("the package is the wheel's", ["smoke", "where"]),
    ("migrate", ["migrate", "--no-input", "-v", "0"]),
    ("check", ["check", "--fail-level", "WARNING"]),
    ("enqueue a job, a chain and a task", ["smoke", "enqueue"]),
    ("runjobs --burst", ["runjobs", "--burst"]),
    ("their outcomes", ["smoke", "outcomes"]),
    ("collectstatic", ["collectstatic", "--no-input", "-v", "0"]),
    ("the console", ["smoke", "console"]),
    # A small run: its recovery checks take the same few seconds whatever the count.
    ("jobsselftest", ["jobsselftest", "--jobs", "40"]),
]
#: Variables of the caller's environment that would let the checkout, or its settings, in.
DROPPED = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "VIRTUAL_ENV",
    "DJANGO_SETTINGS_MODULE",
    "DATABASE_URL",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--python", required=True, help="the interpreter of the fresh virtualenv")
    parser.add_argument("--django", required=True, help="the Django to install beside the wheel")
    parser.add_argument("--extra", action="append", default=[], help="an extra of the wheel to install")
    parser.add_argument(
        "--server", default=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        help="a PostgreSQL URL; the smoke creates and drops a database of its own on that server",
    )  # fmt: skip
    args = parser.parse_args()
    wheel = args.wheel.resolve()
    if wheel.suffix != ".whl" or not wheel.is_file():
        sys.exit(f"not a wheel: {args.wheel}")
    with tempfile.TemporaryDirectory(prefix="django-jobs-smoke-") as scratch:
        Smoke(Path(scratch), args.python, args.server).run(wheel, args.extra, args.django)


class Smoke:
    def __init__(self, scratch: Path, python: str, server: str) -> None:
        if scratch.resolve().is_relative_to(CHECKOUT):
            sys.exit(f"the scratch directory {scratch} is inside the checkout")
        self.scratch = scratch
        self.venv = scratch / "venv"
        self.project = scratch / "project"
        self.python = self.venv / "bin" / "python"
        self.base_python = python
        url = urllib.parse.urlsplit(server)
        self.database = f"django_jobs_smoke_{os.getpid()}"
        self.database_url = url._replace(path=f"/{self.database}").geturl()
        self.maintenance_url = url._replace(path="/postgres").geturl()
        self.env = {key: value for key, value in os.environ.items() if key not in DROPPED}
        self.env = {key: value for key, value in self.env.items() if not key.startswith("DJANGO_JOBS_")}
        self.env.update(
            PATH=f"{self.venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            PYTHONNOUSERSITE="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            SMOKE_DATABASE_URL=self.database_url,
            SMOKE_CHECKOUT=str(CHECKOUT),
        )

    def run(self, wheel: Path, extras: list[str], django: str) -> None:
        started = time.monotonic()
        target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        shutil.copytree(PROJECT, self.project, ignore=shutil.ignore_patterns("__pycache__"))
        self.step("a fresh virtualenv", [self.base_python, "-m", "venv", str(self.venv)])
        self.step("pip install the wheel", [str(self.python), "-m", "pip", "install", "-q", target, django])
        self.sql(f'CREATE DATABASE "{self.database}"')
        try:
            for title, command in STEPS:
                self.step(title, [str(self.python), "manage.py", *command])
        finally:
            self.sql(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        print(f"smoke passed in {time.monotonic() - started:.0f} s: {target} with {django}", flush=True)

    def step(self, title: str, command: list[str]) -> None:
        began = time.monotonic()
        result = subprocess.run(
            command, cwd=self.project, env=self.env, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        said = (result.stdout.strip().splitlines() or [""])[-1]
        print(f"  {title}: {time.monotonic() - began:.1f} s {said[:160]}", flush=True)
        if result.returncode != 0:
            sys.exit(
                f"smoke failed at {title!r}: {shlex.join(command)} exited {result.returncode}\n"
                f"{result.stdout}\n{result.stderr}"
            )

    def sql(self, statement: str) -> None:
        """One statement on the server's maintenance database, by the virtualenv's psycopg."""
        script = "import sys, psycopg; psycopg.connect(sys.argv[1], autocommit=True).execute(sys.argv[2])"
        title = statement.split(" IF ")[0].lower()
        self.step(title, [str(self.python), "-c", script, self.maintenance_url, statement])


if __name__ == "__main__":
    main()
