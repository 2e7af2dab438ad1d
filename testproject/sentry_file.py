"""Sentry in a worker process of the error-tracking tests: the SDK with its Django integration,
and every event written to a file instead of sent (no network): ``SENTRY_EVENTS_FILE``.

A ``Transport`` is the SDK's own seam for where events go; this one appends each event of an
envelope as a JSON line, so a test reads what Sentry would have received.
"""

from __future__ import annotations

import json
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.django import DjangoIntegration
from sentry_sdk.transport import Transport


class EventFile(Transport):
    def __init__(self, path: str, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.path = path

    def capture_envelope(self, envelope: Envelope) -> None:
        events = [item.payload.json for item in envelope.items if item.type == "event"]
        if events:
            with open(self.path, "a") as out:
                out.write("".join(json.dumps(event, default=str) + "\n" for event in events))


def report_to(path: str) -> None:
    """Initialise Sentry for this process, its events to the file at ``path``."""
    sentry_sdk.init(
        dsn="https://public@sentry.invalid/1",
        transport=EventFile(path),
        integrations=[DjangoIntegration()],
        default_integrations=False,  # no excepthook, atexit or threading patches in a test's worker
    )
