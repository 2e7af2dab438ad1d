"""A ``@task`` of Django's Tasks framework on django_jobs (``JobsBackend``), as a peer of the
bench-peers harness: the same measurement as its ``django-tasks`` peer (``db_worker`` of the
reference database backend), with our backend and ``manage.py runjobs``.

    cd $BENCH_PEERS
    BENCH_EXTRA_PEERS=$REPO/bench ./run_peer.sh django-jobs-tasks 10000 1p 3
    ./run_peer.sh django-tasks 10000 1p 3

Everything works as in ``p_django_jobs.py`` (whose helpers it reuses): the harness process only
loads the ``Peer`` class; workers and the enqueue helper run this file in the project's venv.
The no-op job is the task ``testproject.testjobs.tasks.noop``; the latency probe is a task too,
``__main__.bench_ping``, defined by this script in the worker and in the helper alike.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent))  # p_django_jobs, beside this file

NOOP = "testproject.testjobs.tasks.noop"


def bench_ping(key: int) -> None:
    from peers.common import ping

    ping(key)


def _client(ping_task: Any) -> None:
    from testproject.testjobs.tasks import noop

    for line in sys.stdin:
        what, arg = line.split()
        n = int(arg)
        if what == "single":
            for _ in range(n):
                noop.enqueue()
        elif what == "ping":
            ping_task.enqueue(n)
        else:
            raise SystemExit(f"unknown request {line!r}")
        print("ok", flush=True)


if __name__ == "__main__":
    from p_django_jobs import _django

    _django()
    try:
        from django.tasks import task
    except ImportError:  # Django 5.2: the backport
        from django_tasks import task  # type: ignore[no-redef]
    # The task must be reachable at its module path, __main__.bench_ping, in both processes.
    bench_ping = task(bench_ping)  # type: ignore[assignment]
    if sys.argv[1] == "worker":
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", "runjobs", *sys.argv[2:]])
    elif sys.argv[1] == "client":
        _client(bench_ping)
    sys.exit(0)


# ---- the harness side (the harness's venv) --------------------------------------------------
from p_django_jobs import OUR_PYTHON  # noqa: E402
from p_django_jobs import Peer as JobsPeer  # noqa: E402


class Peer(JobsPeer):
    name = "django-jobs-tasks"
    db = "bench_django_jobs_tasks"
    supports_bulk = False
    enqueue_single_desc = "noop.enqueue() per job (JobsBackend: one INSERT + commit per job)"
    CONFIGS: ClassVar[dict[str, tuple[str, dict[str, int]]]] = {
        "1p": (
            "1 `manage.py runjobs` process, --concurrency 1, defaults (batch size 100, poll 0.2 s); "
            "the job is a @task through JobsBackend",
            dict(procs=1, concurrency=1),
        ),
        "1p-c4": ("1 runjobs process, --concurrency 4; @task jobs", dict(procs=1, concurrency=4)),
        "2p": ("2 runjobs processes, --concurrency 1 each; @task jobs", dict(procs=2, concurrency=1)),
    }

    def fill(self, n: int) -> None:
        self.sql(
            "INSERT INTO django_jobs_job (queue, type, version, payload, status, priority,"
            " attempts, max_attempts) SELECT 'default', %s, 1, '{\"args\": [], \"kwargs\": {}}'::jsonb,"
            " 'pending', 0, 0, 3 FROM generate_series(1, %s)",
            (NOOP, n),
        )

    def worker_cmds(self, config: str) -> list[list[str]]:
        p = self.params(config)
        worker = [OUR_PYTHON, __file__, "worker", "--concurrency", str(p["concurrency"])]
        return [worker for _ in range(p["procs"])]

    def _script(self) -> str:
        return __file__
