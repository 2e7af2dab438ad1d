"""``manage.py jobsselftest`` on a throwaway cluster, as a user runs it on theirs: it passes on a
healthy database and leaves nothing behind; it refuses, writing nothing, a queue holding other
jobs, a role that may not insert jobs, and a second run while one is under way; what ``--keep``
keeps, ``--clean`` removes. Behind PgBouncer in transaction mode, with docs/scaling.md's recipe
(the alias declared pooled, the workers' LISTEN on a direct connection, a statement_timeout on
the role), the run and every worker it starts go through the bouncer, and it passes the same
way, even when the worker it freezes holds the record the others' restore looks lock; it leaves
nothing on the pool's server connections either.

The settings are the test project's own, without the environment's sub-second leases: its
workers would hold a lost job for a minute (LEASE_TIMEOUT 60), so each recovery measured in
seconds shows that the self-test ran its workers with its own lease.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.process.pgbouncer import PgBouncer
from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIMITED_ROLE = "selftest_cannot_enqueue"
#: The tables a run writes; each must be as it was once it is done.
TABLES = ("django_jobs_job", "django_jobs_jobevent", "django_jobs_processedeffect", "django_jobs_liveworker")

#: What a passing run says, step by step, in this order.
STEPS = (
    r"started worker A \(pid \d+\) and worker B \(pid \d+\)",
    r"enqueued 300 jobs .*\n  all 300 completed in [\d.]+ s: [\d,]+ jobs/s",
    r"the 10 were retried once and completed on their second attempt",
    r"claim latency, idle workers \(20 jobs enqueued one at a time\): p50 \d+ ms, p95 \d+ ms",
    r"SIGKILL worker [AB] \(pid \d+\) while it ran job \d+",
    r"job \d+ recovered [\d.]+ s after the SIGKILL",
    r"ran it again and completed it .* its effect was not applied again",
    r"SIGSTOP worker [AB] .*\nstarted worker C",
    r"job \d+ recovered [\d.]+ s after the SIGSTOP",
    r"its late writes were refused: .*\(\d+ lease lost\); job \d+ is as worker C .* left it \(fenced\)",
    r"effects: 332 jobs, each applied once",
    r"removed 335 job\(s\), \d+ event\(s\), \d+ ledger key\(s\) and 1 live-worker row\(s\)",
    r"figures: claim latency .*; recovery .* after a SIGKILL, .* after a SIGSTOP \(lease 2 s\)",
    r"PASSED",
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    try:
        pg.create()
        pg.migrate(environment(pg.url))
        with pg.connect() as conn:
            # A role that may do everything to the tables but add a job.
            conn.execute(f"CREATE ROLE {LIMITED_ROLE} LOGIN")
            conn.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {LIMITED_ROLE}"
            )
            conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {LIMITED_ROLE}")
            conn.execute(f"REVOKE INSERT ON django_jobs_job FROM {LIMITED_ROLE}")
        yield pg
    finally:
        pg.destroy()


def environment(url: str) -> dict[str, str]:
    """The test project's settings on ``url``, and nothing of the environment's overrides."""
    return {"DATABASE_URL": url, "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}


def selftest(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "jobsselftest", *args],
        cwd=ROOT, env=environment(url), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def rows(pg: ThrowawayCluster) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a run writes."""
    with pg.connect() as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in TABLES}


def gone(pid: int) -> bool:
    """Whether no self-test worker runs as ``pid`` (the pid may be another process's by now)."""
    try:
        return b"jobsselftest" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True


def assert_every_step_passed(output: str) -> None:
    """Every step of ``STEPS`` said, in order, and both recoveries within seconds although the
    project's LEASE_TIMEOUT is a minute."""
    position = 0
    for step in STEPS:
        found = re.compile(step).search(output, position)
        assert found, f"{step!r} not in (after position {position}):\n{output}"
        position = found.end()
    recoveries = [float(s) for s in re.findall(r"recovered ([\d.]+) s after the SIG", output)]
    assert len(recoveries) == 2 and all(0 < s < 10 for s in recoveries), output


def test_a_run_passes_leaves_nothing_behind_and_refuses_a_second_run_meanwhile(
    cluster: ThrowawayCluster,
) -> None:
    before = rows(cluster)
    with tempfile.NamedTemporaryFile("w+", suffix=".out") as out:
        first = subprocess.Popen(
            [sys.executable, "manage.py", "jobsselftest"],
            cwd=ROOT, env=environment(cluster.url), stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            wait_for(
                lambda: "held by this run" in Path(out.name).read_text(), timeout=60, what="the queue held"
            )
            second = selftest(cluster.url)
            assert first.wait(timeout=120) == 0, Path(out.name).read_text()
        finally:
            if first.poll() is None:
                first.kill()
        output = Path(out.name).read_text()

    assert second.returncode == 2
    assert "refused: another self-test holds queue 'django_jobs_selftest'" in second.stderr
    assert_every_step_passed(output)
    assert rows(cluster) == before
    assert all(gone(int(pid)) for pid in re.findall(r"\(pid (\d+)\)", output))


def test_a_queue_holding_other_jobs_is_refused_and_left_as_it_was(cluster: ThrowawayCluster) -> None:
    with cluster.connect() as conn:
        conn.execute(
            "INSERT INTO django_jobs_job"
            " (queue, type, version, payload, status, priority, attempts, max_attempts)"
            " VALUES ('reports', 'test.noop', 1, '{}', 'pending', 0, 0, 5)"
        )
    try:
        before = rows(cluster)
        refused = selftest(cluster.url, "--queue", "reports")
        assert refused.returncode == 2
        assert "refused: queue 'reports' holds 1 job(s) that are not the self-test's" in refused.stderr
        assert refused.stdout == ""  # not one step taken
        assert rows(cluster) == before
    finally:
        with cluster.connect() as conn:
            conn.execute("DELETE FROM django_jobs_job WHERE queue = 'reports'")


def test_a_role_that_may_not_insert_jobs_is_told_so_and_nothing_is_written(cluster: ThrowawayCluster) -> None:
    before = rows(cluster)
    refused = selftest(cluster.url.replace("postgres@", f"{LIMITED_ROLE}@"))
    assert refused.returncode == 2
    assert f"refused: the database role '{LIMITED_ROLE}' lacks INSERT on django_jobs_job" in refused.stderr
    assert rows(cluster) == before


def test_what_a_kept_run_leaves_is_refused_until_clean_removes_it(cluster: ThrowawayCluster) -> None:
    before = rows(cluster)
    kept = selftest(cluster.url, "--keep", "--jobs", "20")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    run = re.search(r"kept run (\w+): (\d+) job\(s\) and (\d+) ledger key\(s\)", kept.stdout)
    assert run is not None and "--clean --queue django_jobs_selftest" in kept.stdout, kept.stdout
    with cluster.connect() as conn:
        jobs = conn.execute(
            "SELECT count(*) FROM django_jobs_job WHERE queue = 'django_jobs_selftest'"
        ).fetchone()
        keys = conn.execute(
            "SELECT count(*) FROM django_jobs_processedeffect WHERE key LIKE %s",
            [f"django_jobs.selftest:{run[1]}:%"],
        ).fetchone()
    assert (jobs, keys) == ((int(run[2]),), (int(run[3]),))

    refused = selftest(cluster.url)
    assert refused.returncode == 2 and f"an earlier self-test left (run {run[1]}" in refused.stderr

    cleaned = selftest(cluster.url, "--clean")
    assert cleaned.returncode == 0 and f"removed {run[2]} job(s)" in cleaned.stdout, cleaned.stdout
    assert rows(cluster) == before


#: The limit docs/scaling.md has set on the workers' role behind a transaction pool, where a
#: worker sets no session setting. Not the worker's own STATEMENT_TIMEOUT (30 s), so that a SET
#: of the worker's left on a pooled server connection would show.
ROLE_STATEMENT_TIMEOUT = "3s"


@pytest.fixture
def bouncer(cluster: ThrowawayCluster) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the throwaway cluster, as most production
    deployments put it in front of theirs, its role limited as docs/scaling.md says (the
    server connections it opens from now on get the limit; the cluster's other tests do not)."""
    with cluster.connect() as conn:
        conn.execute(
            f"ALTER ROLE postgres IN DATABASE jobs SET statement_timeout = '{ROLE_STATEMENT_TIMEOUT}'"
        )
    pgbouncer = PgBouncer(cluster.port, pool_mode="transaction")
    try:
        yield pgbouncer.start()
    finally:
        pgbouncer.stop()
        with cluster.connect() as conn:
            conn.execute("ALTER ROLE postgres IN DATABASE jobs RESET statement_timeout")


def remote_ports(pid: int) -> Counter[int]:
    """The remote ports of the TCP connections ``pid`` holds open, each counted once per
    connection (none if it is gone, or is no longer a process of the self-test).

    Read from /proc (the sockets among its file descriptors, looked up in the kernel's TCP
    table), because PgBouncer's own lists cannot tell which process a client is: over TCP its
    ``SHOW CLIENTS`` names an address and a port, not a pid.
    """
    if gone(pid):
        return Counter()
    inodes = set()
    with contextlib.suppress(OSError):
        for descriptor in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(descriptor)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    ports: Counter[int] = Counter()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                # fields: slot, local address, remote address, state (01: established), …, inode
                if fields[3] == "01" and fields[9] in inodes:
                    ports[int(fields[2].rsplit(":", 1)[1], 16)] += 1
    return ports


def processes_named(output: str, run_pid: int) -> list[tuple[str, int]]:
    """The processes of a run its output has named so far: each worker once the run has said its
    pid, and the run itself once it holds its queue (its start-up's look for a pooler opens a
    direct connection for a moment, on purpose)."""
    named = [
        (f"worker {name}", int(pid)) for name, pid in re.findall(r"worker ([ABC]) \(pid (\d+)\)", output)
    ]
    return [*named, ("the run", run_pid)] if "now held by this run" in output else named


class StalledLook:
    """The frozen worker holding the database's identity record, from the run's SIGSTOP to its
    SIGCONT: what it does when the signal lands inside its heartbeat's restore look, when that
    look is the whole look's transaction, which locks the record
    (``django_jobs.transitions.restore.look``). A run meets it by chance now and then (about one
    in a hundred, through the bouncer); this makes every run meet it, holding the record in the
    frozen worker's place (or finding it held by the frozen worker itself).

    A look never waits for the record: it skips a held one (``SKIP LOCKED``), asks again within
    ``LOOK_LOCK_WAIT``, and is skipped after that. When a look waited, behind a transaction pool
    (where a worker sets no ``statement_timeout`` of its own: it would stay on a server connection
    other clients get), worker C waited until the frozen worker was continued, which the run does
    only once C has taken its job over, and the run gave up after its patience. ``met`` says a
    look of another worker ran while the record was held (its statement, seen on the server).
    """

    def __init__(self, url: str) -> None:
        self._holder = psycopg.connect(url)  # not autocommit: its transaction holds the record
        self._watch = psycopg.connect(url, autocommit=True)
        self.held = self.met = self.released = False
        self._held_at: object = None

    def __enter__(self) -> StalledLook:
        return self

    def __exit__(self, *exc: object) -> None:
        self._holder.close()  # rolls back: the record is let go whatever happened
        self._watch.close()

    def advance(self, output: str) -> None:
        """Take the record at the SIGSTOP, see another look meet it, let it go at the SIGCONT."""
        if not self.held:
            if "SIGSTOP worker" in output:
                row = self._holder.execute(
                    "SELECT clock_timestamp() FROM django_jobs_databaseidentity WHERE id = 1"
                    " FOR UPDATE SKIP LOCKED"
                ).fetchone()
                # None: the frozen worker holds it itself; then a look from now on meets it.
                now = self._watch.execute("SELECT clock_timestamp()").fetchone()
                self._held_at = row[0] if row else (now[0] if now else None)
                self.held = True
            return
        if self.released:
            return
        if not self.met and self._held_at is not None:
            holder = self._holder.info.backend_pid
            row = self._watch.execute(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> %s AND query_start > %s AND query LIKE %s)",
                [holder, self._held_at, "%databaseidentity WHERE id = 1 FOR UPDATE SKIP LOCKED%"],
            ).fetchone()
            self.met = bool(row and row[0])
        if "SIGCONT worker" in output:
            self._holder.commit()
            self.released = True


def test_a_run_through_pgbouncer_in_transaction_mode_passes_and_leaves_nothing_on_the_pool(
    cluster: ThrowawayCluster, bouncer: PgBouncer
) -> None:
    # docs/scaling.md's recipe: the alias through the bouncer, declared pooled; the workers'
    # LISTEN straight to PostgreSQL. The workers inherit it from the run's environment.
    pooled = {
        **environment(bouncer.url("jobs") + "?DISABLE_SERVER_SIDE_CURSORS=True"),
        "LISTEN_DATABASE_URL": cluster.url,
    }
    before = rows(cluster)
    # The most connections each process of the run held at once, by the port they went to.
    peaks: dict[str, Counter[int]] = {}
    with (
        tempfile.NamedTemporaryFile("w+", suffix=".out") as out,
        tempfile.NamedTemporaryFile("w+", suffix=".err") as err,
        StalledLook(cluster.url) as stall,
    ):
        run = subprocess.Popen(
            [sys.executable, "manage.py", "jobsselftest"],
            cwd=ROOT, env=pooled, stdout=out, stderr=err, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            # Where each process's connections go, looked at every few milliseconds while the
            # run lasts.
            while run.poll() is None:
                assert time.monotonic() < deadline, Path(out.name).read_text()
                said = Path(out.name).read_text()
                stall.advance(said)
                for process, pid in processes_named(said, run.pid):
                    peaks[process] = peaks.get(process, Counter()) | remote_ports(pid)
                time.sleep(0.02)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        output, errors = Path(out.name).read_text(), Path(err.name).read_text()

    assert run.returncode == 0, output + errors
    assert_every_step_passed(output)
    assert "django_jobs.W00" not in output + errors, errors  # the recipe draws no pooling warning
    assert (stall.held, stall.met, stall.released) == (True, True, True), (
        f"the identity record held from the SIGSTOP {stall.held}, another worker's look met it "
        f"{stall.met}, let go at the SIGCONT {stall.released}:\n{output}"
    )
    # Nothing left: no job in its queue (the marker included), no event, no ledger key, no
    # live-worker row.
    assert rows(cluster) == before
    assert all(gone(int(pid)) for pid in re.findall(r"\(pid (\d+)\)", output))

    # Every process of the run went through the bouncer; the run never reached PostgreSQL
    # directly, and each worker with one connection: its LISTEN.
    assert set(peaks) == {"the run", "worker A", "worker B", "worker C"}, peaks
    for process, ports in peaks.items():
        assert set(ports) <= {bouncer.port, cluster.port}, (process, ports)
        assert ports[bouncer.port] >= 1, (process, ports)
        expected_direct = 0 if process == "the run" else 1
        assert ports[cluster.port] == expected_direct, (process, ports)

    # Nothing the run or its workers did outlived a transaction: every server connection of the
    # pool has the server's settings (the role's limit), no LISTEN and no prepared statement.
    with cluster.connect() as direct:
        server = direct.execute(
            "SELECT current_setting('statement_timeout'), current_setting('jit')"
        ).fetchone()
    assert server is not None and server[0] == ROLE_STATEMENT_TIMEOUT, server
    server_default = {"statement_timeout": server[0], "jit": server[1], "listening": "0", "prepared": "0"}
    sessions = bouncer.server_sessions("jobs")
    left = [s for s in sessions if {k: s[k] for k in server_default} != server_default]
    assert left == [], f"left on pooled server connections (server default {server_default})"
