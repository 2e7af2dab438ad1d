"""A fake external provider: a real HTTP server on 127.0.0.1, for the demo and the tests.

``POST /operations/<key>`` performs an operation identified by ``<key>``. Query parameters
script its misbehaviour per key:

- ``fail=N&status=503``: answer ``status`` to the first N requests for this key, then succeed;
- ``retry_after=S``: with a 429 status, send ``Retry-After: S``;
- ``drop=N``: for the first N requests, perform the operation, then drop the connection
  without answering (the client cannot tell whether it happened).

Requests carrying an ``Idempotency-Key`` header are performed once per key: a repeat gets the
stored answer, so the provider holds exactly one object per key.

``GET /operations?idempotency_key=K`` looks an operation up (200 with it, 404 if it never
happened), for reconciliation; ``lookup_status=503`` makes the lookup fail.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


def _new_object_id() -> str:
    """An id no other object of any provider run has, as a real provider's ids are: the demo's
    invoices outlive the provider process, and store its charge ids under a UNIQUE constraint."""
    return f"obj_{uuid.uuid4().hex}"


class FakeProvider:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()  # POSTs per operation key
        self.lookups = 0
        self.objects: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the provider first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                provider._handle(self)

            def do_GET(self) -> None:
                provider._lookup(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the demo prints its own summary

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="fake-provider").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        key = parts.path.rsplit("/", 1)[-1]
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        with self.lock:
            self.requests[key] += 1
            seen = self.requests[key]
            failing = seen <= int(query.get("fail", 0))
            idempotency_key = request.headers.get("Idempotency-Key")
            if not failing:
                object_key = idempotency_key or f"{key}#{seen}"
                created = self.objects.setdefault(
                    object_key, {"id": _new_object_id(), "key": key, "body": body.decode()}
                )
        if not failing and seen <= int(query.get("drop", 0)):
            request.close_connection = True  # performed, but the answer never leaves
            return
        if failing:
            status = int(query.get("status", 503))
            headers = {"Retry-After": query["retry_after"]} if "retry_after" in query else {}
            self._reply(request, status, {"error": "try later"}, headers)
        else:
            self._reply(request, 200, created, {})

    def _lookup(self, request: BaseHTTPRequestHandler) -> None:
        query = {k: v[0] for k, v in parse_qs(urlsplit(request.path).query).items()}
        with self.lock:
            self.lookups += 1
        if "lookup_status" in query:
            self._reply(request, int(query["lookup_status"]), {"error": "lookup unavailable"}, {})
            return
        with self.lock:
            found = self.objects.get(query.get("idempotency_key", ""))
        if found is None:
            self._reply(request, 404, {"error": "no such operation"}, {})
        else:
            self._reply(request, 200, found, {})

    def objects_for(self, key: str) -> list[dict[str, Any]]:
        """The objects created by operations on ``key`` (tests count them)."""
        with self.lock:
            return [o for o in self.objects.values() if o["key"] == key]

    @staticmethod
    def _reply(
        request: BaseHTTPRequestHandler, status: int, body: dict[str, Any], headers: dict[str, str]
    ) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)
