"""The console of a process whose ``CONSOLE_DATABASE`` is a streaming standby of its jobs database
(a throwaway primary and its standby): its pages read the standby and say how far behind it is,
its actions run on the primary, and an action whose job the standby shows in a state the primary
no longer has is refused, and changes nothing."""

from __future__ import annotations

import json
import math
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, LiteralString

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.process.throwaway_pg import ThrowawayCluster, ThrowawayStandby, wait_for_replay
from tests.process.workers import ROOT, wait_for

pytestmark = pytest.mark.slow

LIST = "/admin/django_jobs/job/"
#: A job that failed on its last attempt, and a fresh one, as rows (no handler runs here).
FAILED = """INSERT INTO django_jobs_job
    (queue, type, version, payload, status, priority, attempts, max_attempts, last_error_code,
     execution_id, failed_at, finished_at)
VALUES ('default', 'test.noop', 1, '{}', 'failed', 0, 5, 5, 'UNKNOWN', gen_random_uuid(), now(), now())
RETURNING id"""
PENDING = """INSERT INTO django_jobs_job
    (queue, type, version, payload, status, priority, attempts, max_attempts)
VALUES ('fresh', 'test.noop', 1, '{}', 'pending', 0, 0, 5) RETURNING id"""
#: The job's state and its records on a cluster: status, manual retries, events, admin log entries.
RECORDS = """SELECT status, manual_retries,
       (SELECT count(*) FROM django_jobs_jobevent WHERE job_id = j.id),
       (SELECT count(*) FROM django_admin_log)
FROM django_jobs_job j WHERE id = %s"""


class Console:
    """A process of the test project that serves its console (tests/process/console_client.py)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.process.console_client"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._answer() == {"ready": True}

    def _answer(self, timeout: float = 60) -> Any:
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if readable else ""
        if not line:
            raise AssertionError(f"the console process gave no answer (exit code {self.process.poll()})")
        return json.loads(line)

    def ask(self, **request: Any) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def get(self, path: str) -> str:
        answer = self.ask(get=path)
        assert answer["status"] == 200, answer["body"][:2000]
        return str(answer["body"])

    def post(self, path: str, data: dict[str, str]) -> str:
        answer = self.ask(post=path, data=data)
        assert answer["status"] == 200, answer["body"][:2000]
        return str(answer["body"])

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def banner(page: str) -> str:
    """What the page says of the replica it read."""
    found = re.search(r'id="replica-lag">Read from replica <code>replica</code>: (.*?)\. Actions', page)
    assert found is not None, "no replica banner on the page"
    return found.group(1)


def listed(page: str, job_id: int) -> bool:
    return f"{LIST}{job_id}/change/" in page


def one(cluster: ThrowawayCluster, sql: LiteralString, *params: object) -> tuple[Any, ...]:
    with cluster.connect() as conn:
        row = conn.execute(sql, params).fetchone()
    assert row is not None
    return tuple(row)


def wait_for_receipt(primary: ThrowawayCluster, standby: ThrowawayStandby) -> None:
    """Until the standby has received every byte the primary wrote so far (replayed or not)."""
    (lsn,) = one(primary, "SELECT pg_current_wal_lsn()")
    received = "SELECT coalesce(pg_last_wal_receive_lsn() >= %s, false)"
    wait_for(lambda: one(standby, received, lsn) == (True,), what="the standby to receive the WAL")


@pytest.fixture
def primary() -> Iterator[ThrowawayCluster]:
    pg = ThrowawayCluster()
    try:
        pg.create()
        pg.migrate({"DATABASE_URL": pg.url, "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"})
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def standby(primary: ThrowawayCluster) -> Iterator[ThrowawayStandby]:
    replica = primary.standby()
    try:
        yield replica
    finally:
        replica.destroy()


@pytest.fixture
def console(primary: ThrowawayCluster, standby: ThrowawayStandby) -> Iterator[Console]:
    env = {
        "DATABASE_URL": primary.url,
        "CONSOLE_DATABASE_URL": standby.url,
        "PATH": "/usr/bin:/bin",
        "PYTHONUNBUFFERED": "1",
    }
    process = Console(env)
    try:
        yield process
    finally:
        process.stop()


def test_the_console_reads_the_standby_acts_on_the_primary_and_refuses_what_the_standby_no_longer_shows(
    primary: ThrowawayCluster, standby: ThrowawayStandby, console: Console
) -> None:
    (failed,) = one(primary, FAILED)
    (execution,) = one(primary, "SELECT execution_id::text FROM django_jobs_job WHERE id = %s", failed)
    wait_for_replay(primary, standby)
    wait_for(lambda: banner(console.get(LIST)) == "caught up", what="the banner to say caught up")

    # The standby falls behind: what the primary wrote since is not on the pages.
    standby.pause_replay()
    (fresh,) = one(primary, PENDING)
    wait_for_receipt(primary, standby)
    page = console.get(LIST)
    assert listed(page, failed) and not listed(page, fresh)
    assert re.fullmatch(r"[0-9.]+ s behind", banner(page)), banner(page)
    metrics = {
        (sample.name, tuple(sample.labels.values())): sample.value
        for family in text_string_to_metric_families(console.get("/jobs/metrics"))
        for sample in family.samples
    }
    assert ("django_jobs_queue_pending", ("fresh",)) not in metrics
    lag = metrics[("django_jobs_console_replica_lag_seconds", ("replica",))]
    assert lag > 0 and not math.isnan(lag)

    # Another operator retries the failed job on the primary; the standby still shows it failed.
    assert console.ask(retry=failed) == {"left": "failed"}
    before = one(primary, RECORDS, failed)
    assert before == ("pending", 1, 1, 0)
    confirm = console.get(f"{LIST}act/retry/?ids={failed}")
    assert 'class="djj-status djj-failed">failed<' in confirm and "Retry 1 job" in confirm
    form = dict(re.findall(r'<input type="hidden" name="(ids|seen)" value="([^"]*)"', confirm))
    assert form == {"ids": str(failed), "seen": f"{failed}:failed:{execution}:5:0"}
    refused = console.post(f"{LIST}act/retry/?ids={failed}", {**form, "reason": "provider fixed"})
    assert f"Job {failed} was not retried: it is pending now, not failed as the page showed it." in refused
    assert one(primary, RECORDS, failed) == before  # no transition, no event, no log entry

    # Caught up, then behind again: a cancel confirmed on the standby's page runs on the primary.
    standby.resume_replay()
    wait_for_replay(primary, standby)
    standby.pause_replay()
    confirm = console.get(f"{LIST}act/cancel/?ids={failed}")
    form = dict(re.findall(r'<input type="hidden" name="(ids|seen)" value="([^"]*)"', confirm))
    done = console.post(f"{LIST}act/cancel/?ids={failed}", {**form, "reason": "not wanted after all"})
    assert "Cancel: 1 job(s) done." in done
    assert one(primary, RECORDS, failed) == ("cancelled", 1, 2, 1)
    assert one(standby, RECORDS, failed)[0] == "pending"  # replay paused: the write is not there yet

    # The standby down, the console reads the primary, and says so.
    standby.stop()
    page = console.get(LIST)
    assert banner(page).startswith("unreachable (") and listed(page, fresh)
