"""One run of worker hosts (tests/process/hosts.py) and what it left: the starts each host's
handlers counted in their files, the jobs, events and effects in the database, and the sorting
of every job that started more than once by what ended its earlier starts.

The job type is tests/process/host_jobs.py's: each start writes ``job execution time`` to the
file of its host, then the job works, then it makes its effect through the effect ledger.
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, LiteralString

import psycopg

from tests.process.hosts import HOST_VARIABLE, Host, Hosts, HostWorker, wait_until
from tests.process.lossy_proxy import LossyProxy
from tests.process.throwaway_pg import ThrowawayCluster


@dataclass(frozen=True)
class Start:
    """One start of a handler, as the handler wrote it in its host's file."""

    host: str
    job_id: int
    execution_id: str
    at: float  # time.time(): every host runs on this machine's clock


def starts(directory: Path) -> list[Start]:
    """Every start the handlers wrote in ``directory``, in time order."""
    found = []
    for path in directory.glob("*.starts"):
        # Read while handlers write: a line is whole once its newline is there.
        for line in path.read_text().split("\n")[:-1]:
            job_id, execution_id, at = line.split()
            found.append(Start(path.stem, int(job_id), execution_id, float(at)))
    return sorted(found, key=lambda start: start.at)


def rate(found: Sequence[Start], hosts: set[str], since: float, until: float) -> float:
    """Starts per second on ``hosts`` between two times."""
    return sum(s.host in hosts and since <= s.at < until for s in found) / max(until - since, 1e-9)


@dataclass
class Site:
    """The hosts and the database of this module, and the test's own connection to it (over
    127.0.0.1: no cut reaches it)."""

    hosts: Hosts
    cluster: ThrowawayCluster
    db: psycopg.Connection[tuple[Any, ...]]

    def value(self, sql: LiteralString, params: Sequence[Any] = ()) -> Any:
        row = self.db.execute(sql, params).fetchone()
        return row[0] if row else None

    def rows(self, sql: LiteralString, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, params).fetchall()


class Feeder(threading.Thread):
    """Keeps at least ``low`` jobs pending until stopped: a backlog that outlasts any window
    without being sized for the slowest machine, and that drains in seconds once stopped."""

    def __init__(self, run: Run, pause: float, low: int = 100) -> None:
        super().__init__(name="feeder", daemon=True)
        self._run, self._pause, self._low = run, pause, low
        self._stop_event = threading.Event()
        self.failed: Exception | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self._run.site.cluster.url, autocommit=True) as conn:
                while not self._stop_event.wait(0.25):
                    row = conn.execute(
                        "SELECT count(*) FROM django_jobs_job WHERE status = 'pending'"
                    ).fetchone()
                    if row is not None and row[0] < self._low:
                        self._run.enqueue(conn, self._low, self._pause)
        except Exception as exc:  # raised on the test's thread by stop()
            self.failed = exc

    def stop(self) -> None:
        """Stop feeding; raises what made the feeder stop on its own, if anything did."""
        self._stop_event.set()
        self.join(timeout=10)
        if self.failed is not None:
            raise RuntimeError("the feeder stopped") from self.failed


@dataclass
class Run:
    """One test's workers, proxies, feeder and files; :meth:`close` undoes all of it."""

    site: Site
    #: The workers' settings (DJANGO_JOBS_*), besides their database and host.
    settings: dict[str, str]
    #: Keep the logs and starts files (their directory is printed), to read a failure.
    keep_files: bool = False
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="django-jobs-hosts-")))
    workers: dict[str, HostWorker] = field(default_factory=dict)
    proxies: list[LossyProxy] = field(default_factory=list)
    feeder: Feeder | None = None
    _enqueued: int = 0  # jobs are numbered from 1: each has an effect key of its own
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, host: Host, *args: str, url: str | None = None, **env: str) -> HostWorker:
        environment = {
            "PATH": "/usr/bin:/bin",
            "PYTHONUNBUFFERED": "1",
            **self.settings,
            "DATABASE_URL": url or host.url(self.site.cluster),
            HOST_VARIABLE: host.label,
            **env,
        }
        worker = HostWorker(host, environment, *args, directory=self.directory)
        self.workers[host.label] = worker
        return worker

    def enqueue(self, conn: psycopg.Connection[tuple[Any, ...]], count: int, pause: float) -> list[int]:
        """Enqueue ``count`` jobs (each with an effect of its own); returns their ids."""
        with self._lock:  # the feeder's thread and the test's enqueue
            first = self._enqueued + 1
            self._enqueued += count
        return [
            row[0]
            for row in conn.execute(
                "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority, attempts,"
                " max_attempts) SELECT 'default', 'hosts.counted_effect', 1,"
                " jsonb_build_object('log_dir', %s::text, 'pause', %s::float, 'n', n),"
                " 'pending', 0, 0, 50 FROM generate_series(%s::int, %s::int) AS n RETURNING id",
                [str(self.directory), pause, first, first + count - 1],
            ).fetchall()
        ]

    def feed(self, pause: float) -> None:
        """Keep a backlog of jobs that work ``pause`` seconds each, until :meth:`drain`."""
        self.feeder = Feeder(self, pause)
        self.feeder.start()

    def feed_every_host(self, pause: float) -> None:
        """Start every worker, keep them fed (:meth:`feed`), and wait until each host has
        started jobs."""
        self.started()
        self.feed(pause)
        labels = set(self.workers)
        wait_until(lambda: {s.host for s in starts(self.directory)} >= labels, 60, "every host to work")

    def drain(self, timeout: float = 120) -> None:
        """Stop feeding and wait until every job has ended."""
        if self.feeder is not None:
            self.feeder.stop()
        wait_until(
            lambda: (
                self.site.value("SELECT count(*) FROM django_jobs_job WHERE status IN ('pending', 'running')")
                == 0
            ),
            timeout,
            "every job to end",
        )

    def started(self) -> None:
        """Wait until every worker has announced itself."""
        wait_until(
            lambda: all(worker.worker_id is not None for worker in self.workers.values()),
            60,
            "the workers to start",
        )

    def terminate_all(self) -> dict[str, int]:
        """SIGTERM every worker and wait for it; returns their exit statuses by host."""
        return {label: worker.terminate() for label, worker in self.workers.items()}

    def close(self) -> None:
        """Undo the run: stop feeding, mend every link (a test that failed mid-cut leaves no
        cut behind), close the proxies, kill what is left of the workers, empty the tables,
        remove the files. Every step runs even if one before it fails."""
        with contextlib.ExitStack() as undo:  # callbacks run last pushed, first
            undo.callback(self._remove_files)
            undo.callback(
                self.site.db.execute,
                "TRUNCATE django_jobs_job, django_jobs_processedeffect, testjobs_effectlog CASCADE",
            )
            for worker in self.workers.values():
                undo.callback(worker.stop)
            for proxy in self.proxies:
                undo.callback(proxy.close)
            for host in self.site.hosts.hosts:
                for link in host.links:
                    undo.callback(link.mend)
            if self.feeder is not None:
                undo.callback(self._stop_feeding)

    def _stop_feeding(self) -> None:
        assert self.feeder is not None
        with contextlib.suppress(RuntimeError):  # drain() raised it, if the test got there
            self.feeder.stop()

    def _remove_files(self) -> None:
        if self.keep_files:
            print(f"\nthe hosts' logs and starts are kept in {self.directory}")
        else:
            shutil.rmtree(self.directory, ignore_errors=True)


def assert_effects_once(site: Site) -> int:
    """Every job completed, and its effect happened once: one ledger key, one effect row.
    Returns how many jobs there were."""
    jobs = site.value("SELECT count(*) FROM django_jobs_job")
    by_status = dict(site.rows("SELECT status, count(*) FROM django_jobs_job GROUP BY status"))
    assert by_status == {"completed": jobs}, by_status
    doubled = site.value(
        "SELECT count(*) FROM (SELECT key FROM testjobs_effectlog GROUP BY key HAVING count(*) > 1) AS d"
    )
    assert doubled == 0, f"{doubled} effects happened twice"
    assert site.value("SELECT count(*) FROM testjobs_effectlog") == jobs
    assert site.value("SELECT count(*) FROM django_jobs_processedeffect") == jobs
    return int(jobs)


def runs_by_job(found: Sequence[Start]) -> collections.Counter[int]:
    """How many times each job started, on any host."""
    return collections.Counter(start.job_id for start in found)


@dataclass
class Reruns:
    """Why each job that started more than once did, from what its earlier executions left."""

    #: Its earlier execution lost its lease, and the reaper took the job back.
    recovered: set[int] = field(default_factory=set)
    #: Its earlier execution lost the database under it, and was given back uncounted.
    released: set[int] = field(default_factory=set)
    #: Its earlier execution failed, and a retry was scheduled (job → error code).
    retried: dict[int, str] = field(default_factory=dict)
    #: Nothing says why: a job run twice behind the system's back.
    unaccounted: set[int] = field(default_factory=set)


def reruns(site: Site, found: Sequence[Start]) -> Reruns:
    """Sort the jobs that started more than once by what ended each start but their last one."""
    by_job: dict[int, list[Start]] = collections.defaultdict(list)
    for start in found:
        by_job[start.job_id].append(start)
    again = [job_id for job_id, its in by_job.items() if len(its) > 1]
    ended: dict[str, dict[str, str | None]] = collections.defaultdict(dict)
    for execution_id, kind, code in site.rows(
        "SELECT execution_id::text, kind, error_code FROM django_jobs_jobevent WHERE job_id = ANY(%s)",
        [again],
    ):
        ended[execution_id][kind] = code
    sorted_out = Reruns()
    for job_id in again:
        for start in by_job[job_id][:-1]:
            kinds = ended.get(start.execution_id, {})
            if "recovered" in kinds:
                sorted_out.recovered.add(job_id)
            elif "released" in kinds:
                sorted_out.released.add(job_id)
            elif "retry_scheduled" in kinds:
                sorted_out.retried[job_id] = str(kinds["retry_scheduled"])
            else:
                sorted_out.unaccounted.add(job_id)
    return sorted_out
