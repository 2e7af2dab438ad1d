"""A PostgreSQL cluster of the test's own (initdb + pg_ctl in a temp dir, on a free port), for
tests that restart or stop the server. The shared server is never touched."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg


def _bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        # The server's own folder, where all its tools are (a PATH may link pg_ctl alone).
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not candidates:
        raise RuntimeError("pg_ctl not found: install the PostgreSQL server binaries")
    return candidates[-1].parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayCluster:
    def __init__(self, **settings: str) -> None:
        #: Server settings passed as -c NAME=VALUE at every start (max_connections=20, say).
        self.settings = settings
        self.bin = _bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="django-jobs-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/jobs"

    def _run(self, *args: str) -> None:
        # PostgreSQL refuses to run as root: run its tools as the postgres user then.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def create(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
        )
        self.start()
        with psycopg.connect(f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE jobs")

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir}"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        deadline = time.monotonic() + 30
        while True:
            try:
                return psycopg.connect(self.url, autocommit=True)
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def scalar(self, sql: str) -> int:
        """The integer a one-value query returns (0 for NULL)."""
        with self.connect() as conn:
            row = conn.execute(sql).fetchone()
            return int(row[0]) if row and row[0] is not None else 0

    def migrate(self, env: dict[str, str]) -> None:
        """Create the project's tables with its migrations, as a deployment would."""
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            check=True,
            timeout=120,
        )

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
