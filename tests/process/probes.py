"""Reading a worker's metrics port: where it listens, and what its endpoints say."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.process.workers import WorkerProcess, wait_for

_LISTENING = re.compile(r"metrics and probes on http://[^:]+:(\d+)/")


def metrics_port(worker: WorkerProcess) -> int:
    """The port a worker started with ``--metrics-port 0`` picked (it logs it)."""
    wait_for(lambda: _LISTENING.search(worker.output()) is not None, what="the metrics port in the log")
    match = _LISTENING.search(worker.output())
    assert match is not None
    return int(match[1])


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET a path of the worker's port: (status, body), 503 included."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(port: int, token: str | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The worker's samples, by name and sorted labels (presenting ``token`` if given)."""
    status, text = get(port, "/metrics", {"Authorization": f"Bearer {token}"} if token else None)
    assert status == 200, text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
