"""Several worker hosts and the network between them and PostgreSQL: cuts, latency and loss, and
a partition between a worker's LISTEN connection and its claims.

Each host is a network namespace with real ``runjobs`` processes (tests/process/hosts.py); the
database is a throwaway cluster in the root namespace. What a host ran is counted by the handler
in a file of the host (tests/process/host_jobs.py): the database cannot see what a worker it
cannot reach ran. Every job's business effect goes through the effect ledger, and is counted
in the database.

The windows are short by default, to prove each point within CI's budget (cuts of 12 s against
3 s leases, 12 s of latency); ``DJANGO_JOBS_LONG_PARTITIONS=1`` runs the full versions (cuts of
30 s and 5 minutes, a minute of latency and loss, 30 s partitions). Each test prints its
figures (run with ``-s`` to see them).

The last test is a defect these runs found: a connection that died while its slot idled was
met by the next job's handler inside an atomic block, and the execution was recorded as the
handler's failure. tests/db/test_handler_connections.py holds the same case without namespaces.

Needs root and ``ip netns`` (skipped otherwise, with the reason).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from collections.abc import Iterator
from typing import LiteralString

import psycopg
import pytest

from tests.process.host_runs import Run, Site, assert_effects_once, rate, reruns, runs_by_job, starts
from tests.process.hosts import Hosts, cluster_for, namespaces_unavailable, wait_until
from tests.process.lossy_proxy import LossyProxy

pytestmark = pytest.mark.slow

LONG = os.environ.get("DJANGO_JOBS_LONG_PARTITIONS") == "1"
#: Keep each test's worker logs and starts files (their directory is printed), to read a failure.
KEEP_FILES = os.environ.get("DJANGO_JOBS_KEEP_HOST_FILES") == "1"
LEASE, HEARTBEAT = 3.0, 0.5
#: Leases much shorter than the cuts, so that a cut host's jobs are taken back while it is away.
SETTINGS = {
    "DJANGO_JOBS_LEASE_TIMEOUT": str(LEASE),
    "DJANGO_JOBS_HEARTBEAT_INTERVAL": str(HEARTBEAT),
    "DJANGO_JOBS_REAPER_INTERVAL": "0.5",
    "DJANGO_JOBS_POLL_INTERVAL": "0.2",
    "DJANGO_JOBS_LOG_LEVEL": "INFO",
}
CONCURRENCY = 3
#: Each job works this long: the hosts' throughput is bounded by their slots, not by the CPU of
#: a machine that runs the database and every host, so a change in it is the fault's doing.
PAUSE = 0.2
CUTS = (30, 300) if LONG else (12,)
#: Healthy throughput measured before a fault, and the latency and loss window.
BASELINE = 10.0 if LONG else 6.0
DEGRADED = 60.0 if LONG else 12.0
#: The split: how long the LISTEN path, then the claim path, is cut. The first outlasts the
#: 11 s a silent connection takes to be noticed (TCP_KEEPALIVES_*), so the listener's own
#: fallback is seen, not only the idle worker's periodic look.
LISTEN_CUT = 30.0 if LONG else 13.0
CLAIM_CUT = 30.0 if LONG else 12.0
#: The split host polls this often: slow enough to tell a poll (up to 1 s) from a notification
#: (milliseconds).
SPLIT_POLL = 1.0
#: A host back on the network claims again within this long (documented: within seconds).
RESUME_LIMIT = 30.0


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    # h0 has two links: its LISTEN connection can then be cut apart from its claims.
    try:
        hosts = Hosts.create([2, 1, 1])
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot wire network namespaces here: {exc.stderr.strip()}")
    try:
        cluster = cluster_for(hosts, {"PATH": "/usr/bin:/bin", **SETTINGS})
        try:
            with cluster.connect() as db:
                yield Site(hosts, cluster, db)
        finally:
            cluster.destroy()
    finally:
        hosts.destroy()


@pytest.fixture
def run(site: Site) -> Iterator[Run]:
    site.db.execute("TRUNCATE django_jobs_job, django_jobs_processedeffect, testjobs_effectlog CASCADE")
    this = Run(site, SETTINGS, keep_files=KEEP_FILES)
    try:
        yield this
    finally:
        this.close()


@pytest.mark.parametrize("cut_seconds", CUTS)
def test_a_host_cut_off_holding_running_jobs_is_taken_over_and_comes_back_without_a_rerun(
    site: Site, run: Run, cut_seconds: int
) -> None:
    cut, *healthy = site.hosts.hosts
    for host in site.hosts.hosts:
        run.start(host, "--concurrency", str(CONCURRENCY))
    run.feed_every_host(PAUSE)
    baseline_from = time.time()
    time.sleep(BASELINE)  # the healthy hosts' throughput is measured over this window
    cut_worker = run.workers[cut.label]
    running_sql: LiteralString = (
        "SELECT id, execution_id::text FROM django_jobs_job"
        " WHERE status = 'running' AND worker_id = %s AND started_at IS NOT NULL"
    )
    wait_until(lambda: bool(site.rows(running_sql, [cut_worker.worker_id])), 30, "h0 to run a job")

    cut.links[0].cut()
    cut_at = time.time()
    time.sleep(0.3)  # what was on the wire when the link went down has landed
    # What the database believes the cut host holds: running, or claimed and not started yet.
    held = dict(
        site.rows(
            "SELECT id, execution_id::text FROM django_jobs_job WHERE status = 'running' AND worker_id = %s",
            [cut_worker.worker_id],
        )
    )
    running_held = {job_id for job_id, _ in site.rows(running_sql, [cut_worker.worker_id])}
    assert running_held, "the cut must find the host running jobs"
    # When each held lease runs out (the database's clock is this machine's).
    expires = {
        job_id: float(at)
        for job_id, at in site.rows(
            "SELECT id, extract(epoch FROM lease_expires_at) FROM django_jobs_job WHERE id = ANY(%s)",
            [list(held)],
        )
    }
    wait_until(
        lambda: (
            site.value(
                "SELECT count(*) FROM django_jobs_job WHERE execution_id::text = ANY(%s)",
                [list(held.values())],
            )
            == 0
        ),
        LEASE * 4 + 10,
        "the other hosts to take back what the cut host held",
    )
    time.sleep(max(0.0, cut_at + cut_seconds - time.time()))  # the cut lasts this long
    cut.links[0].mend()
    mended_at = time.time()
    wait_until(
        lambda: sum(s.host == cut.label and s.at > mended_at for s in starts(run.directory)) >= 10,
        RESUME_LIMIT + 30,
        "the host to work again after the cut",
    )
    alive_through_the_cut = cut_worker.process.poll() is None
    run.drain()
    exits = run.terminate_all()
    found = starts(run.directory)

    # The others took the held jobs over once the lease had run out, not before.
    taken_over = {
        job_id: min(s.at for s in found if s.job_id == job_id and s.host != cut.label and s.at > cut_at)
        for job_id in held
    }
    takeover = max(taken_over.values()) - cut_at
    earliest = min(taken_over.values()) - cut_at
    early = {job_id for job_id, at in taken_over.items() if at < expires[job_id]}
    recovered, recovered_after = site.rows(
        "SELECT count(*), extract(epoch FROM max(created_at)) - %s FROM django_jobs_jobevent"
        " WHERE kind = 'recovered' AND execution_id::text = ANY(%s)",
        [cut_at, list(held.values())],
    )[0]
    # Its late writes changed nothing: no held execution ended a job or left an event but the
    # reaper's.
    late_events = site.value(
        "SELECT count(*) FROM django_jobs_jobevent"
        " WHERE kind <> 'recovered' AND execution_id::text = ANY(%s)",
        [list(held.values())],
    )
    stats = cut_worker.stats()
    refused = {
        int(job_id) for job_id in re.findall(r"outcome discarded, lease lost id=(\d+)", cut_worker.output())
    }
    # It started nothing once its leases could have run out, until the link was back; and
    # what ran twice is only what it held when the link went down.
    cut_starts = [s for s in found if s.host == cut.label]
    during = [s for s in cut_starts if cut_at <= s.at < mended_at]
    late_starts = [s for s in during if s.at > cut_at + LEASE]
    runs = runs_by_job(found)
    twice = {job_id: count for job_id, count in runs.items() if count > 1}
    why = reruns(site, found)
    resumed = min(s.at for s in cut_starts if s.at > mended_at) - mended_at
    before = rate(found, {h.label for h in healthy}, baseline_from, baseline_from + BASELINE)
    while_cut = rate(found, {h.label for h in healthy}, cut_at, mended_at)
    jobs = assert_effects_once(site)
    print(
        f"\ncut {cut_seconds}s of a host running {len(running_held)} job(s) (holding {len(held)}): "
        f"leases ran {max(expires.values()) - cut_at:.1f}s more, {recovered} recovered by the reaper "
        f"{float(recovered_after):.1f}s after the cut, running elsewhere {earliest:.1f}-{takeover:.1f}s "
        "after it; "
        f"{stats['lost_leases']} late outcome(s) refused ({len(refused - set(held))} of jobs it did not "
        f"hold), {late_events} landed; started {len(during)} job(s) while cut "
        f"(none after {LEASE:g}s: {not late_starts}); back to work {resumed:.1f}s after the link; "
        f"{jobs} jobs, {sum(runs.values())} executions, {len(twice)} ran twice: {len(why.recovered)} "
        f"taken over (all held: {why.recovered <= set(held)}), {len(why.released)} given back, "
        f"retried {why.retried or 'none'}, {len(why.unaccounted)} unaccounted; "
        f"healthy hosts {before:.1f} jobs/s before, {while_cut:.1f} during "
        f"({while_cut / before:.0%}); claims held back {stats['held_back']}"
    )
    assert alive_through_the_cut and exits == {"h0": 0, "h1": 0, "h2": 0}, exits
    assert recovered == len(held)
    assert not early, f"{early} ran elsewhere before their lease ran out"
    # Recovered as soon as the lease ran out and the next reaper pass came (every 0.5 s ± 20 %);
    # a recovered job then waits its turn behind the backlog, which the figures show.
    assert float(recovered_after) <= LEASE + 2
    assert late_events == 0
    assert running_held <= refused, "what it ran through the cut must end in a refused write"
    assert not late_starts, f"started {late_starts} after its leases could have expired"
    assert all(s.job_id in held for s in during), "a cut host can only start what it held"
    assert not why.unaccounted and why.recovered <= set(held), why
    assert max(twice.values(), default=1) <= 2, twice
    assert cut_worker.count("heartbeat unanswered") >= 1 and cut_worker.count("heartbeat answered again") >= 1
    assert resumed <= RESUME_LIMIT
    assert while_cut >= 0.7 * before, "the healthy hosts must keep their throughput"


#: The slowed host's lease. A heartbeat turn that reports the worker asks the database about 9
#: times in a row (the lease UPDATE, the live-worker row and the restore look's transaction):
#: 1.8 s at 200 ms a round trip, and a stalled chunk adds up to 1 s more. A 3 s lease leaves
#: about one stall of margin, and a lease that runs out under a worker that still runs is a
#: second execution (fenced, its effect still once), which this test counts as a failure. The
#: defaults (60 s leases, a turn every 10 s) leave minutes.
SLOWED_LEASE = 6.0


def test_latency_and_loss_to_one_host_lose_no_job_run_none_twice_and_spare_the_others(
    site: Site, run: Run
) -> None:
    slow, *healthy = site.hosts.hosts
    proxy = LossyProxy(slow.links[0].db_ip, ("127.0.0.1", site.cluster.port), seed=1).start()
    run.proxies.append(proxy)
    run.start(
        slow, "--concurrency", str(CONCURRENCY), url=slow.url(site.cluster, port=proxy.port),
        DJANGO_JOBS_LEASE_TIMEOUT=str(SLOWED_LEASE),
    )  # fmt: skip
    for host in healthy:
        run.start(host, "--concurrency", str(CONCURRENCY))
    run.feed_every_host(PAUSE)
    baseline_from = time.time()
    time.sleep(BASELINE)  # throughput is measured over this window, then over the fault's
    # The round trip through the proxy, timed on a connection of the test's (opened healthy).
    with psycopg.connect(slow.url(site.cluster, port=proxy.port), autocommit=True) as probe:
        proxy.degrade(added_rtt=0.2, loss=0.05)
        degraded_at, chunks_before, stalled_before = time.time(), proxy.chunks, proxy.stalled
        trips = []
        for _ in range(20):
            began = time.monotonic()
            probe.execute("SELECT 1")
            trips.append(time.monotonic() - began)
        time.sleep(max(0.0, degraded_at + DEGRADED - time.time()))  # the fault lasts this long
        proxy.heal()
    healed_at = time.time()
    chunks, stalled = proxy.chunks - chunks_before, proxy.stalled - stalled_before
    time.sleep(BASELINE / 2)  # the slowed host's pace after the fault
    run.drain()
    exits = run.terminate_all()
    found = starts(run.directory)
    runs = runs_by_job(found)
    healthy_labels = {h.label for h in healthy}
    before = rate(found, healthy_labels, baseline_from, baseline_from + BASELINE)
    during = rate(found, healthy_labels, degraded_at, healed_at)
    slow_before = rate(found, {slow.label}, baseline_from, baseline_from + BASELINE)
    slow_during = rate(found, {slow.label}, degraded_at, healed_at)
    slow_after = rate(found, {slow.label}, healed_at, healed_at + BASELINE / 2)
    lost = {label: run.workers[label].stats()["lost_leases"] for label in run.workers}
    jobs = assert_effects_once(site)
    twice = sum(count > 1 for count in runs.values())
    print(
        f"\n{DEGRADED:g}s of +200 ms round trips and 5% stalled chunks to one host "
        f"(a SELECT 1 took {statistics.median(trips) * 1000:.0f} ms p50, {max(trips) * 1000:.0f} ms max; "
        f"{stalled} of {chunks} chunks stalled): {jobs} jobs, {sum(runs.values())} executions, "
        f"{twice} ran twice, leases lost {lost}; healthy hosts {before:.1f} jobs/s before, {during:.1f} "
        f"during ({during / before:.0%}); the slowed host {slow_before:.1f} → {slow_during:.1f} → "
        f"{slow_after:.1f} jobs/s"
    )
    assert exits == {"h0": 0, "h1": 0, "h2": 0}, exits
    assert statistics.median(trips) >= 0.2, "the proxy must add the round trip it was asked to"
    assert stalled > 0
    assert len(runs) == jobs and twice == 0, "no job lost, none run twice"
    assert lost == {"h0": 0, "h1": 0, "h2": 0}
    assert slow_during > 0, "the slowed host keeps working"
    assert during >= 0.7 * before, "the healthy hosts must keep their throughput"


def test_a_partition_between_the_listen_and_the_claim_connections_falls_back_as_documented(
    site: Site, run: Run
) -> None:
    split = site.hosts.hosts[0]
    claims, listens = split.links
    worker = run.start(
        split, "--concurrency", "2",
        LISTEN_DATABASE_URL=split.url(site.cluster, link=1), DJANGO_JOBS_POLL_INTERVAL=str(SPLIT_POLL),
    )  # fmt: skip
    run.started()
    listeners_sql: LiteralString = (
        "SELECT pid FROM pg_stat_activity WHERE client_addr = %s::inet"
        " AND extract(epoch FROM backend_start) > %s"
    )
    wait_until(lambda: bool(site.rows(listeners_sql, [listens.host_ip, 0])), 30, "the worker to LISTEN")

    def trickle(seconds: float, every: float) -> dict[int, float]:
        """Enqueue a job every ``every`` seconds for ``seconds``, one transaction each (one
        notification each); returns when each was enqueued."""
        enqueued: dict[int, float] = {}
        until = time.time() + seconds
        while time.time() < until:
            at = time.time()
            (job_id,) = run.enqueue(site.db, 1, 0)
            enqueued[job_id] = at
            time.sleep(every)
        return enqueued

    def latencies(enqueued: dict[int, float]) -> list[float]:
        wait_until(lambda: len({s.job_id for s in starts(run.directory)} & set(enqueued)) == len(enqueued),
                   RESUME_LIMIT + CLAIM_CUT, "every job enqueued to start")  # fmt: skip
        first: dict[int, float] = {}
        for s in starts(run.directory):
            first.setdefault(s.job_id, s.at)
        return sorted(first[job_id] - at for job_id, at in enqueued.items())

    heard = latencies(trickle(3, 0.3))

    # 1. The LISTEN path goes; the claims' stays. Jobs are found by polling, every SPLIT_POLL.
    listens.cut()
    polled = latencies(trickle(LISTEN_CUT, 0.5))
    listener_lost = worker.count("listening connection lost")
    listens.mend()
    listen_mended_at, listen_mended_clock = time.time(), time.monotonic()
    relisten = (
        wait_until(
            lambda: bool(site.rows(listeners_sql, [listens.host_ip, listen_mended_at])),
            30,
            "the worker to LISTEN again",
        )
        - listen_mended_clock
    )
    heard_again = latencies(trickle(3, 0.3))

    # 2. The claims' path goes; the LISTEN path stays. Notifications keep coming in, and the
    # worker does not claim at each: the claim in flight waits out TCP_USER_TIMEOUT, and then
    # the worker holds back (its heartbeat goes unanswered) until the heartbeat gets through.
    listener = site.rows(listeners_sql, [listens.host_ip, listen_mended_at])
    retries_before = worker.count("database unavailable, retrying in")
    claims.cut()
    claim_cut_at = time.time()
    during_claim_cut = trickle(CLAIM_CUT, 0.2)
    retries = worker.count("database unavailable, retrying in") - retries_before
    listener_kept = site.rows(listeners_sql, [listens.host_ip, listen_mended_at]) == listener
    claims.mend()
    claim_mended_at = time.time()
    waited = latencies(during_claim_cut)
    found = starts(run.directory)
    started_while_claims_cut = [s for s in found if claim_cut_at + 0.5 < s.at < claim_mended_at]
    resumed = min(s.at for s in found if s.job_id in during_claim_cut) - claim_mended_at
    run.drain()
    exits = run.terminate_all()
    jobs = assert_effects_once(site)
    found = starts(run.directory)
    runs = runs_by_job(found)
    why = reruns(site, found)
    print(
        f"\nsplit host, polling every {SPLIT_POLL:g}s: start after enqueue "
        f"{statistics.median(heard) * 1000:.0f} ms p50 while listening; "
        f"LISTEN path cut {LISTEN_CUT:g}s: {len(polled)} jobs started "
        f"{statistics.median(polled) * 1000:.0f} ms p50, {max(polled) * 1000:.0f} ms max, the listener said "
        f"so {listener_lost} time(s), listening again {relisten:.1f}s after the link, then "
        f"{statistics.median(heard_again) * 1000:.0f} ms p50; claim path cut {CLAIM_CUT:g}s: "
        f"{len(during_claim_cut)} notifications, {retries} failed claim(s), listener kept: {listener_kept}, "
        f"{len(started_while_claims_cut)} started meanwhile, claiming again {resumed:.1f}s after the link "
        f"({max(waited):.1f}s the longest wait); {jobs} jobs, {sum(runs.values())} executions "
        f"(given back {len(why.released)}, retried {why.retried or 'none'}, "
        f"{len(why.unaccounted)} unaccounted)"
    )
    assert exits == {"h0": 0}, exits
    assert statistics.median(heard) < 0.15 and statistics.median(heard_again) < 0.15
    # Without its notifications, every job still starts within a poll (and the claim after it).
    assert max(polled) <= SPLIT_POLL + 0.5
    assert statistics.median(polled) >= 0.1, "the LISTEN path was not cut: starts still took milliseconds"
    assert listener_lost >= 1, "the listener must notice its connection is gone, and say so"
    assert relisten <= 15
    assert listener_kept and not started_while_claims_cut
    assert retries <= 8 + CLAIM_CUT / 5 and retries < len(during_claim_cut) / 2
    assert resumed <= RESUME_LIMIT
    assert worker.count("heartbeat unanswered") >= 1 and worker.count("heartbeat answered again") >= 1
    # Held nothing when its claims' path went: nothing to take over. What ran again was ended
    # by the system first (see test_a_job_meeting_a_connection_a_cut_broke_while_its_slot_idled_…).
    assert not why.unaccounted and not why.recovered, why


#: Longer than a silent connection takes to be given up (TCP_KEEPALIVES_*: 11 s), so that the
#: idle slots' connections are dead when the link comes back.
IDLE_CUT = 13.0


def test_a_job_meeting_a_connection_a_cut_broke_while_its_slot_idled_is_given_back_uncounted(
    site: Site, run: Run
) -> None:
    host = site.hosts.hosts[1]
    worker = run.start(host, "--concurrency", "2")
    run.started()
    run.enqueue(site.db, 4, PAUSE)  # each slot opens its connection, and keeps it
    wait_until(lambda: len(starts(run.directory)) == 4, 30, "the first jobs to run")
    run.drain(30)
    host.links[0].cut()
    cut_at = time.time()
    time.sleep(IDLE_CUT)  # nothing runs: the slots' connections idle until the keepalives give up
    host.links[0].mend()
    wait_until(
        lambda: worker.count("heartbeat answered again") >= 1, RESUME_LIMIT, "the heartbeat to get through"
    )
    run.enqueue(site.db, 4, 0)
    run.drain(RESUME_LIMIT)
    exit_status = worker.terminate()
    found = starts(run.directory)
    after = [s for s in found if s.at > cut_at]
    why = reruns(site, found)
    attempts = site.value("SELECT max(attempts) FROM django_jobs_job")
    print(
        f"\nafter a {IDLE_CUT:g}s cut of an idle host: {len(after)} starts of 4 jobs; given back "
        f"{len(why.released)}, retried {why.retried or 'none'}; most attempts {attempts}"
    )
    if exit_status != 0 or why.unaccounted or len(after) == 4:
        pytest.fail(
            f"the cut must break the idle slots' connections, and nothing else: {why}, exit {exit_status}"
        )
    try:
        assert_effects_once(site)
    except AssertionError as exc:  # not the failure this test expects: report it as one
        pytest.fail(f"an effect did not happen once: {exc}")
    # docs/workers.md: a handler that loses its connection to the jobs database is given back
    # at once, its attempt not counted.
    assert not why.retried and attempts == 1, why
