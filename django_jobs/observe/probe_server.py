"""The HTTP server of ``runjobs --metrics-port``: ``/metrics``, ``/healthz`` and ``/readyz``
(:mod:`django_jobs.observe.probes` says what each answers). A module of its own so that a
worker without the port does not load ``http.server``."""

from __future__ import annotations

import ipaddress
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django_jobs.observe.exposition import bearer_token_matches
from django_jobs.observe.liveness import Liveness, Verdict
from django_jobs.observe.probes import ProbeError

logger = logging.getLogger("django_jobs.probes")


class ProbeServer:
    """Binds at once (so that a port in use is an error before the worker starts), serves once
    :meth:`start` is given the worker's liveness."""

    def __init__(self, host: str, port: int, token: str | None = None) -> None:
        """Listen on ``host``:``port``; ``token``, when given, is the bearer token ``/metrics``
        asks for."""
        try:
            self._server = ThreadingHTTPServer((host, port), _Handler, bind_and_activate=True)
        except OSError as exc:
            raise ProbeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._server.daemon_threads = True
        self.host, self.port = host, int(self._server.server_address[1])
        self.token = token
        self._thread: threading.Thread | None = None

    def start(self, liveness: Liveness) -> None:
        if self.token is None and not _loopback(str(self._server.server_address[0])):
            logger.warning(
                "metrics port %s:%s serves without a token: anyone who reaches it reads this "
                "worker's job types, queues and error codes; set DJANGO_JOBS['METRICS_TOKEN']",
                self.host, self.port,
            )  # fmt: skip
        self._server.liveness = liveness  # type: ignore[attr-defined]
        self._server.token = self.token  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
            name="django_jobs-probes", daemon=True,
        )  # fmt: skip
        self._thread.start()
        logger.info("metrics and probes on http://%s:%s/ (/metrics, /healthz, /readyz)", self.host, self.port)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    server_version = "django_jobs"

    def do_GET(self) -> None:
        liveness: Liveness = self.server.liveness  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._verdict(liveness.live())
        elif path == "/readyz":
            self._verdict(liveness.ready())
        elif path == "/metrics":
            if self._may_read_metrics():
                self._metrics(liveness)
            else:
                self._send(401, b"a bearer token is required\n", "text/plain; charset=utf-8",
                           {"WWW-Authenticate": 'Bearer realm="django_jobs"'})  # fmt: skip
        else:
            self._send(404, b"not found: /metrics, /healthz, /readyz\n", "text/plain; charset=utf-8")

    def _may_read_metrics(self) -> bool:
        """The rule of the metrics view, for a port that has no sessions: with a token set,
        only a request that presents it."""
        token: str | None = self.server.token  # type: ignore[attr-defined]
        return token is None or bearer_token_matches(self.headers.get("Authorization", ""), token)

    def _verdict(self, verdict: Verdict) -> None:
        self._send(200 if verdict.ok else 503, verdict.text().encode(), "text/plain; charset=utf-8")

    def _metrics(self, liveness: Liveness) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

        own = generate_latest(REGISTRY)
        health = (
            "# HELP django_jobs_worker_live 1 while this worker is alive and useful (/healthz).\n"
            "# TYPE django_jobs_worker_live gauge\n"
            f"django_jobs_worker_live {int(liveness.live().ok)}\n"
            "# HELP django_jobs_worker_ready 1 while this worker can take work (/readyz).\n"
            "# TYPE django_jobs_worker_ready gauge\n"
            f"django_jobs_worker_ready {int(liveness.ready().ok)}\n"
            "# HELP django_jobs_worker_restore_held 1 while a restore hold keeps this worker's jobs of "
            "external types waiting.\n"
            "# TYPE django_jobs_worker_restore_held gauge\n"
            f"django_jobs_worker_restore_held {int(liveness.restore_held())}\n"
        )
        self._send(200, own + health.encode(), CONTENT_TYPE_LATEST)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a scrape every few seconds is not news; errors are logged by the server


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
