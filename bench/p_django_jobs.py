"""django_jobs as a peer of the bench-peers harness.

    cd $BENCH_PEERS
    BENCH_EXTRA_PEERS=$REPO/bench LATENCY=0 ./run_peer.sh django-jobs 10000 "1p 2p" 3

The harness process (its own venv, without django_jobs) only loads the ``Peer`` class below.
Everything that needs django_jobs runs in this project's venv (``.venv/bin/python``), by running
this same file as a script:

* ``p_django_jobs.py worker ARGS``: ``manage.py runjobs ARGS`` (testproject settings) with one
  extra job type, ``bench.ping``, registered before the command starts. Its handler's first
  statement is ``peers.common.ping(key)`` (the harness's idle-latency probe); the testproject
  is left as it is.
* ``p_django_jobs.py client``: a long-lived helper that reads ``single N`` / ``bulk N`` /
  ``ping KEY`` lines on stdin and answers ``ok`` when done. ``enqueue_single``,
  ``enqueue_bulk`` and ``enqueue_ping`` go through it, so they measure the real
  ``enqueue()`` / ``enqueue_many()`` (warm connection; one pipe round trip per harness call,
  i.e. per 2,000 / 20,000 jobs, or per ping).
* ``fill(n)`` (the backlog, whose speed is not a reported metric) is one INSERT … SELECT
  generate_series in the harness process: the same columns ``enqueue_many`` writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUR_PYTHON = str(ROOT / ".venv" / "bin" / "python")
TABLES = "django_jobs_job, django_jobs_jobevent"
# OR, not IN: only the OR form is served by the partial indexes (a BitmapOr of the
# status='pending' and status='running' ones); `status IN (...)` scans the whole table.
REMAINING = "SELECT count(*) FROM django_jobs_job WHERE status = 'pending' OR status = 'running'"


def _django() -> None:
    """In our venv: set Django up on testproject and register the latency probe's job type."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from peers.common import ping as _ping  # on PYTHONPATH: the harness folder

    from django_jobs import JobContext, job

    @job("bench.ping", external=False)
    def ping(ctx: JobContext, payload: dict[str, int]) -> None:
        _ping(payload["key"])


def _client() -> None:
    from django_jobs import enqueue, enqueue_many

    for line in sys.stdin:
        what, arg = line.split()
        n = int(arg)
        if what == "single":
            for _ in range(n):
                enqueue("test.noop", {})
        elif what == "bulk":
            for start in range(0, n, 1000):
                enqueue_many("test.noop", [{}] * min(1000, n - start))
        elif what == "ping":
            enqueue("bench.ping", {"key": n})
        else:
            raise SystemExit(f"unknown request {line!r}")
        print("ok", flush=True)


if __name__ == "__main__":
    _django()
    if sys.argv[1] == "worker":
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", "runjobs", *sys.argv[2:]])
    elif sys.argv[1] == "client":
        _client()
    sys.exit(0)


# ---- the harness side (the harness's venv) --------------------------------------------------
import peers  # noqa: E402
import psycopg  # noqa: E402
from peers.base import PG, BasePeer, dsn  # noqa: E402

BENCH_DIR = str(Path(peers.__file__).resolve().parent.parent)


class Peer(BasePeer):
    name = "django-jobs"
    db = "bench_django_jobs"
    packages = ("django-jobs-pg", "Django", "psycopg")
    supports_bulk = True
    enqueue_single_desc = 'enqueue("test.noop", {}) per job (autocommit: one INSERT + commit per job)'
    enqueue_bulk_desc = 'enqueue_many("test.noop", [{}] * 1000) per call (one 1000-row INSERT)'
    CONFIGS: ClassVar[dict[str, tuple[str, dict[str, int]]]] = {
        "1p": (
            "1 `manage.py runjobs` process, --concurrency 1, defaults (batch size 100, "
            "poll interval 0.2 s from testproject settings)",
            dict(procs=1, concurrency=1),
        ),
        "1p-default": (
            "1 `manage.py runjobs` process, --concurrency 1, the library's defaults (poll interval "
            "1 s, LISTEN/NOTIFY on)",
            dict(procs=1, concurrency=1, default_poll=1),
        ),
        "1p-c4": ("1 runjobs process, --concurrency 4", dict(procs=1, concurrency=4)),
        "2p": ("2 runjobs processes, --concurrency 1 each", dict(procs=2, concurrency=1)),
    }

    def __init__(self) -> None:
        self._client: subprocess.Popen[str] | None = None
        self._versions: dict[str, str] | None = None

    def url(self) -> str:
        """The workers' and the enqueue helper's DATABASE_URL. BENCH_PREPARE_THRESHOLD=N adds
        Django's ``OPTIONS["prepare_threshold"]`` (docs/scaling.md, "Prepared statements")."""
        url = f"postgres://{PG['user']}:{PG['password']}@{PG['host']}:{PG['port']}/{self.db}"
        threshold = os.environ.get("BENCH_PREPARE_THRESHOLD")
        return f"{url}?prepare_threshold={int(threshold)}" if threshold else url

    def env(self) -> dict[str, str]:
        return {
            "DATABASE_URL": self.url(),
            "DJANGO_SETTINGS_MODULE": "testproject.settings",
            "DEBUG": "False",
        }

    def _env_full(self) -> dict[str, str]:
        env = {**os.environ, **self.env()}
        env["PYTHONPATH"] = BENCH_DIR + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def setup(self) -> None:
        # Re-created at every harness step: an edited migration would not be re-applied to an
        # old schema. Fails (database in use) if another run uses it.
        with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db}"')
        self.create_db()
        subprocess.run(
            [OUR_PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=self._env_full(), check=True
        )

    def reset(self) -> None:
        self.sql(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")

    def teardown(self) -> None:
        if self._client is not None:
            assert self._client.stdin is not None
            self._client.stdin.close()
            self._client.wait(10)
            self._client = None

    def _request(self, what: str, n: int) -> None:
        if self._client is None:
            self._client = subprocess.Popen(
                [OUR_PYTHON, self._script(), "client"],
                cwd=ROOT,
                env=self._env_full(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        assert self._client.stdin is not None
        assert self._client.stdout is not None
        self._client.stdin.write(f"{what} {n}\n")
        self._client.stdin.flush()
        while (line := self._client.stdout.readline()) != "ok\n":
            if not line:
                raise RuntimeError(f"the enqueue helper exited (code {self._client.wait()})")

    def _script(self) -> str:
        """The file run as the enqueue helper (a subclass measuring tasks runs its own)."""
        return __file__

    def fill(self, n: int) -> None:
        self.sql(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority,"
            " attempts, max_attempts) SELECT 'default', 'test.noop', 1, '{}'::jsonb, 'pending',"
            " 0, 0, 5 FROM generate_series(1, %s)",
            (n,),
        )

    def enqueue_single(self, n: int) -> None:
        self._request("single", n)

    def enqueue_bulk(self, n: int) -> None:
        self._request("bulk", n)

    def enqueue_ping(self, key: int) -> None:
        self._request("ping", key)

    def remaining(self, conn) -> int:  # type: ignore[no-untyped-def]
        return self.count(conn, REMAINING)

    def worker_cmds(self, config: str) -> list[list[str]]:
        p = self.params(config)
        return [
            [OUR_PYTHON, __file__, "worker", "--concurrency", str(p["concurrency"])]
            for _ in range(p["procs"])
        ]

    def worker_env(self, config: str) -> dict[str, str]:
        env = self.env()
        if self.params(config).get("default_poll"):
            env["DJANGO_JOBS_POLL_INTERVAL"] = "1.0"  # DJANGO_JOBS's default, not testproject's 0.2
        return env

    def versions(self) -> dict[str, str]:
        if self._versions is None:
            code = (
                "import importlib.metadata as m, json, sys;"
                "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))"
            )
            out = subprocess.run(
                [OUR_PYTHON, "-c", code, *self.packages], capture_output=True, text=True, check=True
            )
            self._versions = json.loads(out.stdout)
            git = subprocess.run(
                ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                capture_output=True,
                text=True,
            )
            self._versions["django-jobs git"] = git.stdout.strip() or "?"
        return self._versions
