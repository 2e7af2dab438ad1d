"""Worker hosts on one machine: each a network namespace wired to PostgreSQL by links that can be
cut, and the ``runjobs`` processes that run in them.

A link is a cable through a switch: host ⟷ switch ⟷ database. The switch is a bridge in a
namespace of its own, and the database's end is a veth in the root namespace, where a throwaway
cluster listens on the address of every link. A cut takes the database's cable out of the switch
(``ip link set down`` on its root end): the host's own interface stays up, as it does when a
switch port or a link further away fails, the switch drops what it cannot deliver without a
word, and the host's connections wait on their retransmissions. Cutting the host's own end
instead would fail its sends at once, which no real cut does. A host can have several links,
each on a subnet of its own, so that one of its paths to the database (the LISTEN connection's,
say) can be cut while another stays up.

Latency and loss go through :class:`~tests.process.lossy_proxy.LossyProxy`, listening on a
link's database address: the host's traffic still crosses its link. A kernel with ``sch_netem``
could delay and drop packets on the link itself (``tc qdisc add dev <root end> root netem …``);
kernels without it answer "Specified qdisc kind is unknown", and the proxy runs on every kernel,
so the figures of one machine compare with another's.

Everything is named after this process's id (``djjh<pid>…``), so runs do not meet, and
namespaces left by a run that was killed outright are swept by the next one. Needs root and
``ip netns``; :func:`namespaces_unavailable` says why not.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.process.throwaway_pg import ThrowawayCluster
from tests.process.workers import ROOT

#: The environment variable naming the host a worker runs on (its starts file is named after it).
HOST_VARIABLE = "WORKER_HOST_NAME"
#: Namespace names of this harness: a host ``djjh<pid>h<i>``, a link's switch ``…h<i>s<j>``.
_NAMESPACE = re.compile(r"^djjh(?P<pid>\d+)h\d+(s\d+)?$")


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)
    return done.stdout


def namespaces_unavailable() -> str | None:
    """Why worker hosts cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        return f"ip netns is unavailable here: {probe.stderr.strip()}"
    return None


def sweep_stale_namespaces() -> None:
    """Delete the namespaces of runs whose process is gone (a run killed outright cleans up
    nothing). Deleting a switch's namespace also deletes its veths, the root ends included."""
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        match = _NAMESPACE.match(name)
        if match and not Path(f"/proc/{match['pid']}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


def _free_subnets(count: int) -> list[str]:
    """``count`` /24 prefixes (``10.x.y``) no interface of the root namespace is on."""
    used = set(re.findall(r"inet (\d+\.\d+\.\d+)\.\d+/", _ip("-4", "-o", "addr", "show")))
    start = os.getpid() * 7 % 25_600
    candidates = (f"10.{100 + (start + k) % 25_600 // 256}.{(start + k) % 256}" for k in range(25_600))
    free = [net for net in candidates if net not in used][:count]
    if len(free) < count:
        raise RuntimeError("no free 10.100-199.x.0/24 subnet left for the hosts' links")
    return free


@dataclass
class Link:
    """One cable between a host and the database: host ⟷ switch ⟷ root namespace."""

    switch: str  # the namespace of the switch's bridge
    root_end: str  # the veth in the root namespace: taken down to cut
    net: str  # the first three octets of its /24: the database's end is .1, the host's .2

    @property
    def db_ip(self) -> str:
        """Where the database (and any proxy) listens for the host on this link."""
        return f"{self.net}.1"

    @property
    def host_ip(self) -> str:
        """The host's address on this link: what PostgreSQL sees as ``client_addr``."""
        return f"{self.net}.2"

    def cut(self) -> None:
        _ip("link", "set", self.root_end, "down")

    def mend(self) -> None:
        _ip("link", "set", self.root_end, "up")


@dataclass
class Host:
    """A machine of a deployment: a namespace whose only ways out are its links."""

    label: str  # "h0": names its files and its worker's role in the figures
    namespace: str
    links: list[Link] = field(default_factory=list)

    @property
    def prefix(self) -> tuple[str, ...]:
        """What runs a command on this host."""
        return ("ip", "netns", "exec", self.namespace)

    def url(self, cluster: ThrowawayCluster, link: int = 0, port: int | None = None) -> str:
        """The database's URL for this host over ``link`` (to ``port``: a proxy's, say)."""
        return f"postgres://postgres@{self.links[link].db_ip}:{port or cluster.port}/jobs"


class Hosts:
    """The hosts of one test module, created together and destroyed together."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.hosts: list[Host] = []
        self._namespaces: list[str] = []

    @classmethod
    def create(cls, links_per_host: Sequence[int]) -> Hosts:
        """One host per entry, with that many links. On any failure, what was made is removed."""
        sweep_stale_namespaces()
        made = cls(str(os.getpid()))
        try:
            nets = iter(_free_subnets(sum(links_per_host)))
            for i, links in enumerate(links_per_host):
                made._add_host(i, links, nets)
        except BaseException:
            made.destroy()
            raise
        return made

    def _add_host(self, i: int, links: int, nets: Iterator[str]) -> None:
        host = Host(f"h{i}", f"djjh{self.tag}h{i}")
        _ip("netns", "add", host.namespace)
        self._namespaces.append(host.namespace)
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        self.hosts.append(host)
        for j in range(links):
            host.links.append(self._add_link(host, i, j, next(nets)))

    def _add_link(self, host: Host, i: int, j: int, net: str) -> Link:
        # Interface names have 15 characters at most; the root end's must be unique there.
        link = Link(f"{host.namespace}s{j}", f"djr{int(self.tag) % 100_000}{i}{j}", net)
        _ip("netns", "add", link.switch)
        self._namespaces.append(link.switch)
        _ip("-n", link.switch, "link", "add", "sw0", "type", "bridge")
        _ip("-n", link.switch, "link", "set", "sw0", "up")
        # The database's cable: root namespace ⟷ switch port "to-db".
        _ip("link", "add", link.root_end, "type", "veth", "peer", "name", "to-db", "netns", link.switch)
        _ip("addr", "add", f"{link.db_ip}/24", "dev", link.root_end)
        _ip("link", "set", link.root_end, "up")
        # The host's cable: switch port "to-host" ⟷ the host's interface "db<j>".
        _ip(
            "-n",
            link.switch,
            "link",
            "add",
            "to-host",
            "type",
            "veth",
            "peer",
            "name",
            f"db{j}",
            "netns",
            host.namespace,
        )
        for port in ("to-db", "to-host"):
            _ip("-n", link.switch, "link", "set", "dev", port, "master", "sw0")
            _ip("-n", link.switch, "link", "set", "dev", port, "up")
        _ip("-n", host.namespace, "addr", "add", f"{link.host_ip}/24", "dev", f"db{j}")
        _ip("-n", host.namespace, "link", "set", f"db{j}", "up")
        return link

    @property
    def db_addresses(self) -> list[str]:
        return [link.db_ip for host in self.hosts for link in host.links]

    def destroy(self) -> None:
        """Remove every namespace (their veths go with them, the root ends included)."""
        for namespace in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)
        for host in self.hosts:
            for link in host.links:  # gone with its switch; this only makes sure
                subprocess.run(["ip", "link", "del", link.root_end], capture_output=True, timeout=10)


def cluster_for(hosts: Hosts, env: dict[str, str]) -> ThrowawayCluster:
    """A throwaway cluster listening on 127.0.0.1 and on every link's database address, that
    trusts the hosts' subnets, migrated with ``env``. The caller destroys it."""
    cluster = ThrowawayCluster(listen_addresses=",".join(["127.0.0.1", *hosts.db_addresses]))
    try:
        cluster.create()
        with open(cluster.data / "pg_hba.conf", "a") as hba:
            for host in hosts.hosts:
                for link in host.links:
                    hba.write(f"host all all {link.net}.0/24 trust\n")
        with cluster.connect() as conn:
            conn.execute("SELECT pg_reload_conf()")
        cluster.migrate({**env, "DATABASE_URL": cluster.url})
    except BaseException:
        cluster.destroy()
        raise
    return cluster


class HostWorker:
    """``runjobs`` (with the hosts' job type) on a host: its process, its log, its exit stats."""

    def __init__(self, host: Host, env: dict[str, str], *args: str, directory: Path) -> None:
        self.host = host
        self.log = directory / f"{host.label}.worker.log"
        self.stats_file = directory / f"{host.label}.stats.json"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [*host.prefix, sys.executable, "-m", "tests.process.host_runjobs",
                 "--stats-file", str(self.stats_file), *args],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # a signal for the test runner never reaches the worker
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def worker_id(self) -> str | None:
        """The id the worker announced at its start (None before)."""
        found = re.search(r"worker started.*? id=(\S+)", self.output())
        return found[1] if found else None

    def count(self, text: str) -> int:
        """How many lines of the worker's log contain ``text``."""
        return sum(text in line for line in self.output().splitlines())

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, as a deployment stops a worker; returns its exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def stats(self) -> dict[str, Any]:
        """What ``--stats-file`` wrote at exit (lost leases, claims held back…)."""
        return dict(json.loads(self.stats_file.read_text()))

    def stop(self) -> None:
        """Kill whatever is left of the process (after a failure: a passing test terminated it)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def wait_until(condition: Callable[[], object], timeout: float, what: str, every: float = 0.2) -> float:
    """Poll ``condition`` every ``every`` seconds until it is true; returns the monotonic time
    it became so. Slower than tests/process/workers.wait_for's 50 ms on purpose: the conditions
    here read files and the database, and a run of several workers has little CPU to spare."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
    return time.monotonic()
