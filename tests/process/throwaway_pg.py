"""A PostgreSQL cluster of the test's own (initdb + pg_ctl in a temp dir, on a free port), for
tests that restart or stop the server, and streaming standbys of it, for tests that read from a
replica (one that can be made to fall behind at will). The shared server is never touched."""

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
from typing import LiteralString, SupportsInt, cast

import psycopg
from psycopg import pq

#: pg_basebackup -X stream holds two WAL senders while it copies; the standby then takes one.
MIN_WAL_SENDERS = 3


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
    def __init__(self, *, bindir: Path | None = None, **settings: str) -> None:
        #: Server settings passed as -c NAME=VALUE at every start (max_connections=20, say).
        self.settings = settings
        #: The server's tools: ``bindir`` (another version's, say), else the ones on PATH.
        self.bin = bindir or _bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="django-jobs-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/jobs"

    def _run(self, *args: str) -> None:
        # PostgreSQL refuses to run as root: run its tools as the postgres user then.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def _own_dir(self) -> None:
        """Give the temp dir to the postgres user when the tests run as root (the server runs as it)."""
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")

    def create(self) -> None:
        self._own_dir()
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
            return int(cast(SupportsInt, row[0])) if row and row[0] is not None else 0

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

    def allow_replication(self) -> None:
        """Make this running cluster a primary a standby can stream from: a WAL level a standby can
        replay, enough WAL senders for pg_basebackup -X stream and then the standby, and a pg_hba
        line that lets replication connections from 127.0.0.1 in. initdb's defaults have all three
        in PostgreSQL 15, but settings given to the cluster or another version's defaults may not:
        each is checked, and fixed only when missing. The settings come first: with no WAL sender
        free, a replication connection is refused whatever pg_hba says."""
        with psycopg.connect(self._url_of("postgres"), autocommit=True) as conn:
            wal_level = str(_row(conn, "SHOW wal_level")[0])
            senders = int(str(_row(conn, "SHOW max_wal_senders")[0]))
        if wal_level == "minimal" or senders < MIN_WAL_SENDERS:
            self.settings.update(wal_level="replica", max_wal_senders=str(max(senders, MIN_WAL_SENDERS)))
            self.stop()
            self.start()
        if self._replication_refused() is not None:
            hba = self.data / "pg_hba.conf"
            # Prepended: the first line that matches a connection decides.
            hba.write_text(f"host replication all 127.0.0.1/32 trust\n{hba.read_text()}")
            with psycopg.connect(self._url_of("postgres"), autocommit=True) as conn:
                conn.execute("SELECT pg_reload_conf()")
            refused = self._replication_refused()
            if refused is not None:
                raise RuntimeError(f"replication connections to port {self.port} refused: {refused}")

    def standby(self, **settings: str) -> ThrowawayStandby:
        """A running streaming replica of this cluster, on a port and in a temp dir of its own
        (``settings`` as for a cluster). The caller destroys it, before this cluster."""
        replica = ThrowawayStandby(self, **settings)
        try:
            replica.create()
        except BaseException:
            replica.destroy()
            raise
        return replica

    def _url_of(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _replication_refused(self) -> str | None:
        """Why a physical replication connection, as pg_basebackup and the standby make it, is
        refused (None if it is not). Trying one is the only sure answer: pg_hba's first matching
        line decides, and a replication line can be shadowed by one above it."""
        conn = pq.PGconn.connect(
            f"host=127.0.0.1 port={self.port} user=postgres replication=true connect_timeout=10".encode()
        )
        try:
            return None if conn.status == pq.ConnStatus.OK else conn.error_message.decode(errors="replace")
        finally:
            conn.finish()


class ThrowawayStandby(ThrowawayCluster):
    """A hot standby streaming from ``primary`` (pg_basebackup -R -X stream): read-only, with the
    same databases, and a replay that can be paused so that it falls behind the primary on cue."""

    def __init__(self, primary: ThrowawayCluster, **settings: str) -> None:
        super().__init__(bindir=primary.bin, **settings)
        self.primary = primary

    def create(self) -> None:
        """Copy the primary and start streaming from it; its ``jobs`` database comes from the
        primary, so nothing is created here."""
        self.primary.allow_replication()
        self._own_dir()
        self._run(
            str(self.bin / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-D",
            str(self.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        self.start()

    def pause_replay(self) -> None:
        """Stop applying the primary's WAL (it still streams in), so that the standby falls behind.
        Returns once the pause has taken effect: since PostgreSQL 14 pg_wal_replay_pause() only
        requests it, and a write made before then could still be replayed."""
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            deadline = time.monotonic() + 30
            while _row(conn, "SELECT pg_get_wal_replay_pause_state()") != ("paused",):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby on port {self.port} did not pause its replay")
                time.sleep(0.05)

    def resume_replay(self) -> None:
        """Apply the WAL received meanwhile, and keep up again."""
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")


def wait_for_replay(primary: ThrowawayCluster, standby: ThrowawayCluster, timeout: float = 30) -> None:
    """Wait until ``standby`` has replayed all the WAL ``primary`` has written so far, so that what
    was committed on the primary can be read on the standby (streaming is asynchronous)."""
    with primary.connect() as conn:
        target = str(_row(conn, "SELECT pg_current_wal_lsn()::text")[0])
    deadline = time.monotonic() + timeout
    with standby.connect() as conn:
        while True:
            replayed, caught_up, paused = _row(
                conn,
                "SELECT pg_last_wal_replay_lsn()::text,"
                " coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false), pg_get_wal_replay_pause_state()",
                (target,),
            )
            if caught_up:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the standby on port {standby.port} replayed up to {replayed} in {timeout}s,"
                    f" not to the primary's {target} (replay: {paused})"
                )
            time.sleep(0.05)


def _row(
    conn: psycopg.Connection[tuple[object, ...]], sql: LiteralString, params: tuple[object, ...] = ()
) -> tuple[object, ...]:
    """The one row ``sql`` returns (every query here returns exactly one)."""
    row = conn.execute(sql, params).fetchone()
    if row is None:
        raise RuntimeError(f"no row from {sql}")
    return row
