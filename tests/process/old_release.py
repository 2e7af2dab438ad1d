"""The previous release's workers, as far as the job table goes: its statements in raw SQL, run in
a loop on connections of their own while a migration is applied or unapplied
(tests/process/live_migrations.py), with the longest wait of any of them and their errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


def release_job_fields(release: str) -> set[str]:
    """The job's fields at migration ``release`` (its columns, for the fields this module uses)."""
    from django.db.migrations.loader import MigrationLoader

    state = MigrationLoader(None, ignore_no_migrations=True).project_state(("django_jobs", release))
    return set(state.models["django_jobs", "job"].fields)


class OldWorkers:
    """Threads running the previous release's statements in a loop on connections of their own,
    each cycle in short transactions: enqueue two jobs, claim up to five ``FOR UPDATE SKIP
    LOCKED`` (holding their row locks a moment, as a claim's transaction does), renew their
    leases, complete them: the statements of the release whose last migration is ``release``."""

    def __init__(self, url: str, release: str, threads: int = 2) -> None:
        self.url = url
        self.errors: list[str] = []
        self.cycles = 0
        self.longest = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        ready = " AND ready" if "ready" in release_job_fields(release) else ""
        self.claim = f"""
            UPDATE django_jobs_job SET status = 'running', attempts = attempts + 1,
                worker_id = 'old-host:2:y', execution_id = gen_random_uuid(), started_at = now(),
                heartbeat_at = now(), lease_expires_at = now() + interval '30 seconds'
            WHERE id IN (SELECT id FROM django_jobs_job
                         WHERE queue = 'old' AND status = 'pending' AND available_at <= now(){ready}
                         ORDER BY priority DESC, available_at, id LIMIT 5 FOR UPDATE SKIP LOCKED)
            RETURNING id"""
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> OldWorkers:
        for thread in self._threads:
            thread.start()
        return self

    def wait_for_cycles(self, cycles: int, timeout: float = 30) -> None:
        """Until ``cycles`` cycles ran in all, or a thread failed, or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        while self.cycles < cycles and not self.errors and time.monotonic() < deadline:
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    @contextmanager
    def _timed(self) -> Iterator[None]:
        began = time.monotonic()
        yield
        with self._lock:
            self.longest = max(self.longest, time.monotonic() - began)

    def _run(self) -> None:
        try:
            with psycopg.connect(self.url) as conn:
                while not self._stop.is_set():
                    self._cycle(conn)
                    with self._lock:
                        self.cycles += 1
        except psycopg.Error as exc:
            with self._lock:
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _cycle(self, conn: psycopg.Connection[Any]) -> None:
        with self._timed(), conn.transaction():
            conn.execute(
                "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority,"
                " attempts, max_attempts) VALUES ('old', 'old.noop', 1, '{}', 'pending', 0, 0, 5),"
                " ('old', 'old.noop', 1, '{}', 'pending', 1, 0, 5)"
            )
        with conn.transaction():
            with self._timed():
                ids = [job_id for (job_id,) in conn.execute(self.claim)]  # type: ignore[arg-type]
            time.sleep(0.02)
        with self._timed(), conn.transaction():
            conn.execute(
                "UPDATE django_jobs_job SET heartbeat_at = now(),"
                " lease_expires_at = now() + interval '30 seconds' WHERE id = ANY(%s) AND status = 'running'",
                [ids],
            )
        with self._timed(), conn.transaction():
            conn.execute(
                "UPDATE django_jobs_job SET status = 'completed', completed_at = now(), finished_at = now()"
                " WHERE id = ANY(%s) AND status = 'running'",
                [ids],
            )
