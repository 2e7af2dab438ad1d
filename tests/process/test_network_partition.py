"""A worker cut off from PostgreSQL by a network fault, then let back: few jobs run twice.

The worker runs in a network namespace of its own, linked to the host by a veth pair; a
throwaway cluster listens on the host's end. ``ip link set down`` on that end cuts the link the
way a failed switch port does: no error, no reset, packets just vanish, and every connection
with a statement in flight sits in the kernel's retransmission back-off. A reaper on the host
side takes the cut worker's jobs back once their leases run out, as the rest of a deployment
would. Executions are counted by the handler itself, in a file: the database cannot see what a
worker it cannot reach ran.

Needs root and ``ip netns`` (skipped otherwise, with the reason).
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import ROOT, WorkerProcess, wait_for

pytestmark = pytest.mark.slow

#: Leases shorter than the cuts, so the cut worker's jobs are taken back while it is away.
LEASES = {
    "DJANGO_JOBS_LEASE_TIMEOUT": "3.0",
    "DJANGO_JOBS_HEARTBEAT_INTERVAL": "0.5",
    "DJANGO_JOBS_REAPER_INTERVAL": "0.5",
    "DJANGO_JOBS_POLL_INTERVAL": "0.2",
    "DJANGO_JOBS_LOG_LEVEL": "INFO",
}
CONCURRENCY = 3
JOBS = 1500
#: Jobs run twice at most: those the worker held when the link went down (running, or claimed
#: and started before its heartbeat was missed: a batch's worth), and nothing after it is back.
MAX_RERUNS = 30


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class Namespace:
    """The worker's network namespace, plugged into a switch (a bridge in a namespace of its
    own) that the host is plugged into too: worker ⟷ switch ⟷ host.

    The cut takes the host's cable out of the switch: the worker's own link stays up (a link
    down on the worker's side fails its sends at once, which no real cut does), the switch
    drops what it cannot deliver without a word, and the worker's connections wait on their
    retransmission back-off.
    """

    name: str
    switch: str
    host_link: str
    net: str  # the first three octets of a /24: the host is .1, the worker .2

    @property
    def host_ip(self) -> str:
        """Where PostgreSQL listens for the worker."""
        return f"{self.net}.1"

    @property
    def worker_ip(self) -> str:
        return f"{self.net}.2"

    @classmethod
    def create(cls) -> Namespace:
        n = os.getpid() % 10_000
        ns = cls(f"djjobs{n}", f"djjobss{n}", f"djjh{n}", f"10.{200 + n % 50}.{n // 50 % 256}")
        try:
            _ip("netns", "add", ns.name)
            _ip("netns", "add", ns.switch)
            ns._in(ns.switch, "ip", "link", "add", "sw0", "type", "bridge")
            ns._in(ns.switch, "ip", "link", "set", "sw0", "up")
            # The host's cable: host ⟷ switch port 1.
            _ip("link", "add", ns.host_link, "type", "veth", "peer", "name", f"djjp{n}")
            _ip("link", "set", f"djjp{n}", "netns", ns.switch)
            _ip("addr", "add", f"{ns.host_ip}/24", "dev", ns.host_link)
            _ip("link", "set", ns.host_link, "up")
            # The worker's cable: switch port 2 ⟷ worker.
            ns._in(ns.switch, "ip", "link", "add", f"djjq{n}", "type", "veth", "peer", "name", f"djjw{n}")
            ns._in(ns.switch, "ip", "link", "set", f"djjw{n}", "netns", ns.name)
            for port in (f"djjp{n}", f"djjq{n}"):
                ns._in(ns.switch, "ip", "link", "set", port, "master", "sw0")
                ns._in(ns.switch, "ip", "link", "set", port, "up")
            ns._in(ns.name, "ip", "addr", "add", f"{ns.worker_ip}/24", "dev", f"djjw{n}")
            ns._in(ns.name, "ip", "link", "set", f"djjw{n}", "up")
            ns._in(ns.name, "ip", "link", "set", "lo", "up")
        except BaseException:
            ns.destroy()
            raise
        return ns

    @staticmethod
    def _in(namespace: str, *command: str) -> None:
        _ip("netns", "exec", namespace, *command)

    def cut(self) -> None:
        _ip("link", "set", self.host_link, "down")

    def mend(self) -> None:
        _ip("link", "set", self.host_link, "up")

    def destroy(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, timeout=10)
        for namespace in (self.name, self.switch):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)


def _namespaces_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        return f"ip netns is unavailable here: {probe.stderr.decode().strip()}"
    return None


@pytest.fixture(scope="module")
def network() -> Iterator[tuple[Namespace, ThrowawayCluster]]:
    reason = _namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        ns = Namespace.create()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.decode().strip()}")
    cluster = ThrowawayCluster(listen_addresses=f"127.0.0.1,{ns.host_ip}")
    try:
        cluster.create()
        with open(cluster.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {ns.worker_ip}/32 trust\n")
        with cluster.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
        cluster.migrate(_env(cluster.url))
        yield ns, cluster
    finally:
        cluster.destroy()
        ns.destroy()


def _env(url: str) -> dict[str, str]:
    return {"DATABASE_URL": url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", **LEASES}


def _enqueue(cluster: ThrowawayCluster, log: Path) -> None:
    with cluster.connect() as conn:
        conn.execute("TRUNCATE django_jobs_job CASCADE")
        conn.execute(
            "INSERT INTO django_jobs_job"
            " (queue, type, version, payload, status, priority, attempts, max_attempts)"
            " SELECT 'default', 'test.counted', 1, jsonb_build_object('log', %s::text, 'pause', 0.02),"
            " 'pending', 0, 0, 50 FROM generate_series(1, %s)",
            [str(log), JOBS],
        )


def _executions(log: Path) -> collections.Counter[str]:
    """How many times each job started, as its handler counted."""
    if not log.exists():
        return collections.Counter()
    return collections.Counter(line.split()[0] for line in log.read_text().splitlines() if line)


@pytest.mark.parametrize("cut_seconds", [30, 120])
def test_a_worker_cut_off_from_the_database_reruns_only_what_it_held(
    network: tuple[Namespace, ThrowawayCluster], cut_seconds: int
) -> None:
    ns, cluster = network
    log = Path(tempfile.mkdtemp(prefix="django-jobs-partition-")) / "executions"
    _enqueue(cluster, log)
    cut_url = f"postgres://postgres@{ns.host_ip}:{cluster.port}/jobs"
    worker = WorkerProcess(
        _env(cut_url), "--concurrency", str(CONCURRENCY), prefix=("ip", "netns", "exec", ns.name)
    )
    reaper = subprocess.Popen(
        [sys.executable, "manage.py", "reapjobs", "--loop", "--interval", "0.5"],
        cwd=ROOT, env=_env(cluster.url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    completed = "SELECT count(*) FROM django_jobs_job WHERE status = 'completed'"
    try:
        wait_for(lambda: cluster.scalar(completed) >= 100, timeout=60, what="the backlog to be under way")
        ns.cut()
        cut_at = time.monotonic()
        try:
            # The reaper on the host side takes back what the cut worker held.
            wait_for(
                lambda: cluster.scalar("SELECT count(*) FROM django_jobs_job WHERE status = 'running'") == 0,
                timeout=30, what="the cut worker's jobs to be taken back",
            )  # fmt: skip
            time.sleep(max(0.0, cut_seconds - (time.monotonic() - cut_at)))  # the cut lasts this long
        finally:
            ns.mend()
        mended_at = time.monotonic()
        wait_for(lambda: cluster.scalar(completed) == JOBS, timeout=240, what="every job to complete")
        drained_in = time.monotonic() - mended_at
        runs = _executions(log)
        reruns = sum(runs.values()) - len(runs)
        print(
            f"cut {cut_seconds}s: {sum(runs.values())} executions of {len(runs)} jobs, {reruns} re-run; "
            f"backlog drained {drained_in:.1f}s after the link came back"
        )
        assert len(runs) == JOBS
        assert reruns <= MAX_RERUNS, f"{reruns} jobs ran twice after a {cut_seconds}s cut"
        assert worker.process.poll() is None, "the worker must ride out the cut"
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        worker.stop()
        reaper.send_signal(signal.SIGKILL)
        reaper.wait(timeout=10)
        shutil.rmtree(log.parent, ignore_errors=True)
