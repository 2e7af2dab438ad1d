"""A worker's probes: the HTTP endpoints of ``runjobs --metrics-port`` and the health file of
``runjobs --health-file``.

The HTTP server (:mod:`django_jobs.observe.probe_server`, loaded only with ``--metrics-port``)
is a daemon thread of the worker (``http.server``, one thread per request):

- ``/metrics``: this worker's counters and histograms (prometheus-client's default registry),
  and its liveness and readiness as gauges; never a database query, so that scraping a fleet
  of workers costs the database nothing. With ``METRICS_TOKEN`` set it answers only a request
  that presents the token as a bearer token (401 otherwise), as the metrics view does; without
  one it answers anyone who reaches the port, which listens on 127.0.0.1 unless told otherwise
  (and warns at start when told to listen further without a token);
- ``/healthz``: 200 ``ok`` while the worker is live, else 503 with the reasons, one a line;
- ``/readyz``: 200 while it is ready, else 503 with the reasons. The probes need no token:
  a kubelet's probe sends none, and they say only whether the worker is well, and why not.

The health file is touched at most once a second while the worker is live, and not while it
is not: its age is the probe (an exec probe or a systemd timer compares it with a limit).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from django_jobs.observe.liveness import Liveness

logger = logging.getLogger("django_jobs.probes")

#: The health file is touched at most this often (seconds): a probe's limit is far longer.
TOUCH_INTERVAL = 1.0


class ProbeError(Exception):
    """A probe cannot be set up (a port in use, a directory that does not exist)."""


class HealthFile:
    """A file whose modification time is the worker's last healthy turn."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ProbeError(f"cannot write the health file {self.path}: no directory {self.path.parent}")
        if self.path.is_dir():
            raise ProbeError(f"cannot write the health file {self.path}: it is a directory")
        self._touched = 0.0
        self._warned = False

    def turn(self, liveness: Liveness) -> None:
        """Touch the file if the worker is live and it was not touched in the last second."""
        now = time.monotonic()
        if now - self._touched < TOUCH_INTERVAL:
            return
        self._touched = now
        verdict = liveness.live()
        if not verdict.ok:
            if not self._warned:
                logger.error("worker unhealthy, health file left to age: %s", "; ".join(verdict.reasons))
                self._warned = True
            return
        self._warned = False
        self.touch()

    def touch(self) -> None:
        try:
            self.path.touch()
            os.utime(self.path)
        except OSError as exc:
            logger.warning("could not touch the health file %s: %s", self.path, exc.strerror or exc)

    def check_writable(self) -> None:
        """Raise ProbeError if the file cannot be written (at start-up, before any work)."""
        try:
            self.path.touch()
        except OSError as exc:
            raise ProbeError(f"cannot write the health file {self.path}: {exc.strerror or exc}") from None
