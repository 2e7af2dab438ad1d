"""How a job talks to an external provider: HTTP status → the error that steers the retry."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from typing import Any

from django_jobs import ErrorCode, JobContext, PermanentError, RateLimitedError, RetryableError


def provider_url() -> str:
    url = os.environ.get("DEMO_PROVIDER_URL")
    if not url:
        raise PermanentError("DEMO_PROVIDER_URL is not set", code="CONFIG_MISSING")
    return url


def call_provider(ctx: JobContext, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST to the provider with a stable Idempotency-Key and a timeout within the deadline."""
    timeout = min(10.0, ctx.time_left() or 10.0)
    request = urllib.request.Request(
        provider_url() + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": ctx.idempotency_key()},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            result: dict[str, Any] = json.load(response)
            return result
    except urllib.error.HTTPError as exc:
        if exc.code == 429:
            retry_after = float(exc.headers.get("Retry-After") or 1)
            raise RateLimitedError(f"provider rate limit on {path}", retry_after=retry_after) from exc
        if exc.code >= 500:
            raise RetryableError(
                f"provider answered {exc.code} on {path}", code=ErrorCode.PROVIDER_5XX
            ) from exc
        if exc.code in (401, 403):
            raise PermanentError(
                f"provider refused our credentials on {path}", code=ErrorCode.AUTH_FAILED
            ) from exc
        raise PermanentError(f"provider answered {exc.code} on {path}", code=ErrorCode.PROVIDER_4XX) from exc
    except (TimeoutError, http.client.RemoteDisconnected, ConnectionResetError) as exc:
        # The request was sent: the operation may have happened. NETWORK_TIMEOUT says so, and a
        # type with `reconcile` is asked before its next attempt.
        raise RetryableError(
            f"no answer from the provider on {path}", code=ErrorCode.NETWORK_TIMEOUT
        ) from exc
    except urllib.error.URLError as exc:
        raise RetryableError(
            f"provider unreachable on {path}: {exc.reason}", code=ErrorCode.NETWORK_ERROR
        ) from exc


def lookup_operation(ctx: JobContext, idempotency_key: str, query: str = "") -> dict[str, Any] | None:
    """Ask the provider whether an operation happened: its object, None if not.

    Raises ``RetryableError`` when the provider cannot answer.
    """
    request = urllib.request.Request(f"{provider_url()}/operations?idempotency_key={idempotency_key}{query}")
    try:
        with urllib.request.urlopen(request, timeout=min(10.0, ctx.time_left() or 10.0)) as response:
            found: dict[str, Any] = json.load(response)
            return found
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise RetryableError(f"provider lookup answered {exc.code}", code=ErrorCode.PROVIDER_5XX) from exc
