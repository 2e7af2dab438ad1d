"""A PgBouncer of the test's own in front of a PostgreSQL server: Debian's ``pgbouncer`` package
(1.18 there: no support for prepared statements), with the ``[pgbouncer]`` settings of
docs/scaling.md's recipe (transaction mode), on a free port, in a temp dir, stopped afterwards.

Transaction mode is what the tests behind it are for: a client is lent a server connection for
one transaction at a time, so whatever a client leaves on a session (a ``SET``, a ``LISTEN``, a
prepared statement) stays on a server connection that the next client gets. The pool is small
(``POOL_SIZE``), so that clients keep trading its connections, as in production.

``./run test`` installs the package where it may (as root); a run without it skips the tests
that need it, except in CI (``CI`` set), where they fail: CI must prove the recipe.
"""

from __future__ import annotations

import configparser
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from tests.docs.snippets import ROOT, blocks

#: Server connections per database and user: a few, so that clients share them.
POOL_SIZE = 8
#: What ``server_sessions`` reads of each server connection.
SESSION_FIELDS = ("pid", "statement_timeout", "jit", "listening", "prepared")


def pgbouncer_binary() -> str:
    """The pgbouncer executable; skips the test without it (fails it in CI)."""
    found = shutil.which("pgbouncer") or next(
        (str(p) for p in (Path("/usr/sbin/pgbouncer"), Path("/usr/bin/pgbouncer")) if p.exists()), None
    )
    if found is None:
        missing = "pgbouncer is not installed: apt-get install pgbouncer (./run test does, as root)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def documented_settings() -> dict[str, str]:
    """The ``[pgbouncer]`` settings of docs/scaling.md's recipe: every bouncer of the tests runs
    with them, its own address, authentication and pool size aside."""
    found = [b for b in blocks(ROOT / "docs" / "scaling.md") if b.lang == "ini" and "[pgbouncer]" in b.code]
    assert len(found) == 1, f"docs/scaling.md: expected one PgBouncer configuration, found {len(found)}"
    parser = configparser.ConfigParser()
    parser.read_string(found[0].code)
    return dict(parser["pgbouncer"])


class PgBouncer:
    """``pgbouncer`` in front of the PostgreSQL server at ``server_port`` (any database name is
    passed through to it, as the same name), with docs/scaling.md's settings (``pool_mode``
    overrides its mode). Trust authentication for the users it is told."""

    def __init__(
        self,
        server_port: int,
        *,
        pool_mode: str | None = None,
        users: tuple[str, ...] = ("postgres",),
        server_host: str = "127.0.0.1",
    ) -> None:
        self.binary = pgbouncer_binary()
        self.server = (server_host, server_port)
        self.pool_mode = pool_mode
        self.users = users
        self.dir = Path(tempfile.mkdtemp(prefix="django-jobs-pgbouncer-"))
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str, user: str = "postgres") -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def _write_config(self) -> Path:
        host, port = self.server
        (self.dir / "users.txt").write_text("".join(f'"{user}" ""\n' for user in self.users))
        settings = {
            **documented_settings(),
            # Its own address, trust authentication, a small pool, and what a test needs.
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.dir / "users.txt"),
            "default_pool_size": str(POOL_SIZE),
            "max_client_conn": "500",
            # After a server restart, log in again within a second (default 15 s).
            "server_login_retry": "1",
            "logfile": str(self.dir / "pgbouncer.log"),
        }
        if self.pool_mode is not None:
            settings["pool_mode"] = self.pool_mode
        config = self.dir / "pgbouncer.ini"
        lines = ["[databases]", f"* = host={host} port={port}", "[pgbouncer]"]
        config.write_text("\n".join([*lines, *(f"{key} = {value}" for key, value in settings.items()), ""]))
        return config

    def start(self) -> PgBouncer:
        config = self._write_config()
        # PgBouncer refuses to run as root: it drops to the postgres user then (-u).
        user = ["-u", "postgres"] if os.geteuid() == 0 else []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            for path in self.dir.iterdir():
                shutil.chown(path, "postgres", "postgres")
        self.process = subprocess.Popen(
            [self.binary, *user, str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a signal for the test runner never reaches it
        )
        deadline = time.monotonic() + 10
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start: {self.log()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen on port {self.port}: {self.log()[-2000:]}")
            time.sleep(0.05)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # Immediate shutdown in PgBouncer 1.18 (clients cut); later releases wait for their
            # clients to leave first, which the kill below cuts short.
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def server_sessions(self, database: str) -> list[dict[str, str]]:
        """The settings of every server connection the pool holds for ``database``, each read
        inside a transaction held open until all are read, so that each is a different one.

        What one client set on a session, the next client of that server connection inherits:
        this is how a test sees what was left behind.
        """
        held: list[psycopg.Connection[tuple[object, ...]]] = []
        sessions = []
        try:
            for _ in range(POOL_SIZE):
                conn = psycopg.connect(self.url(database), prepare_threshold=None, connect_timeout=5)
                held.append(conn)  # not autocommit: its transaction pins one server connection
                row = conn.execute(
                    "SELECT pg_backend_pid(), current_setting('statement_timeout'), current_setting('jit'),"
                    " (SELECT count(*) FROM pg_listening_channels()),"
                    " (SELECT count(*) FROM pg_prepared_statements)"
                ).fetchone()
                assert row is not None
                sessions.append(dict(zip(SESSION_FIELDS, map(str, row), strict=True)))
        finally:
            for conn in held:
                conn.close()
        return sessions
