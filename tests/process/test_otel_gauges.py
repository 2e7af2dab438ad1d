"""``--otel-queue-gauges`` in real ``reapjobs --loop`` and ``runjobs`` processes, with the SDK's
meter provider exporting to a file every 200 ms (testproject/metric_file.py), as a collector's
exporter would: the per-queue gauges read the database at each export, and a worker's event
metrics go out beside them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from django_jobs import enqueue, pause_queue
from django_jobs.models import Job
from django_jobs.states import JobStatus
from tests.process.workers import FAST_LEASES, ROOT, StartWorker, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def last_export(path: Path) -> dict[str, dict[str, float]]:
    """The last export in the file: each instrument's values by queue (a counter's summed over
    its other attributes)."""
    # Only whole lines: the worker may be writing the next export as it is read.
    text = path.read_text() if path.exists() else ""
    lines = text[: text.rfind("\n") + 1].splitlines()
    found: dict[str, dict[str, float]] = {}
    if not lines:
        return found
    export: dict[str, Any] = json.loads(lines[-1])
    for resource in export["resource_metrics"]:
        for scope in resource["scope_metrics"]:
            for metric in scope["metrics"]:
                by_queue = found.setdefault(metric["name"], {})
                for point in metric["data"]["data_points"]:
                    queue = point["attributes"].get("messaging.destination.name", "")
                    by_queue[queue] = by_queue.get(queue, 0) + point.get("value", point.get("count", 0))
    return found


def on(path: Path, instrument: str, *queues: str) -> list[float | None]:
    """The last export's values of ``instrument`` for ``queues`` (None: a queue it did not
    report, as the dashboard leaves out an undeclared queue with nothing left in it)."""
    found = last_export(path).get(instrument, {})
    return [found.get(queue) for queue in queues]


def test_a_reaper_loop_reports_the_queues_as_they_change(
    worker_env: dict[str, str], tmp_path: Path
) -> None:
    exports = tmp_path / "metrics.jsonl"
    for _ in range(3):
        enqueue("test.noop", {}, queue="mail")
    enqueue("test.noop", {}, queue="reports")
    pause_queue("reports", actor="ops", reason="month end")
    reaper = subprocess.Popen(
        [sys.executable, "manage.py", "reapjobs", "--loop", "--interval", "0.5", "--otel-queue-gauges"],
        cwd=ROOT, env={**FAST_LEASES, **worker_env, "OTEL_METRICS_FILE": str(exports)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(
            lambda: on(exports, "django_jobs.queue.pending", "mail", "reports") == [3, 1],
            what="the reaper's first export of the gauges",
        )
        assert on(exports, "django_jobs.queue.paused", "mail", "reports") == [0, 1]
        enqueue("test.noop", {}, queue="mail")  # each export reads the database again
        wait_for(
            lambda: on(exports, "django_jobs.queue.pending", "mail") == [4],
            what="an export that saw the new job",
        )
    finally:
        reaper.send_signal(signal.SIGTERM)
        output, _ = reaper.communicate(timeout=20)
    assert reaper.returncode == 0, output


def test_a_worker_reports_the_queues_beside_its_own_executions(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    exports = tmp_path / "metrics.jsonl"
    jobs = [enqueue("test.noop", {}, queue="mail") for _ in range(5)]
    for _ in range(2):
        enqueue("test.noop", {}, queue="reports")  # a queue this worker does not serve
    worker = start_worker("--queue", "mail", "--otel-queue-gauges", env={"OTEL_METRICS_FILE": str(exports)})
    wait_for(
        lambda: Job.objects.filter(id__in=[j.id for j in jobs], status=JobStatus.COMPLETED).count() == 5,
        what="the jobs to complete",
    )
    wait_for(
        lambda: on(exports, "django_jobs.queue.pending", "mail", "reports") == [None, 2]
        and last_export(exports).get("messaging.client.consumed.messages") == {"mail": 5},
        what="an export after the jobs completed",
    )
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
