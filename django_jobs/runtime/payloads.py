"""A claimed job's payload as its handler expects it: decoded, and upcast to its type's version.

A payload stored at an older version of its type is passed through the type's upcasters, one
version at a time. A payload that cannot be decoded or upcast fails alone, permanently: no
retry will make it fit.
"""

from __future__ import annotations

import json

from django_jobs.errors import ErrorCode, PermanentError
from django_jobs.registry import JobType
from django_jobs.transitions import Claim


def decode_payload(claim: Claim, job_type: JobType) -> dict[str, object]:
    """Decode the stored payload and upcast it to the type's current version.

    Raises ``PermanentError(PAYLOAD_INVALID)``: a payload that cannot be decoded fails alone.
    """
    try:
        payload = decode_json(claim.payload)
    except ValueError as exc:
        raise PermanentError(f"payload is not valid JSON: {exc}", code=ErrorCode.PAYLOAD_INVALID) from exc
    if not isinstance(payload, dict):
        raise PermanentError("payload is not a JSON object", code=ErrorCode.PAYLOAD_INVALID)
    version = claim.version
    while version < job_type.version:
        upcast = job_type.upcasters.get(version)
        if upcast is None:  # the claim leaves versions its upcasters do not reach
            raise PermanentError(
                f"no upcaster from payload version {version} of {claim.type!r}",
                code=ErrorCode.PAYLOAD_INVALID,
            )
        try:
            payload = upcast(payload)
        except Exception as exc:
            # The stored payload does not fit the contract of its version: no retry will help.
            raise PermanentError(
                f"upcasting payload version {version} of {claim.type!r} failed: {type(exc).__name__}: {exc}",
                code=ErrorCode.PAYLOAD_INVALID,
            ) from exc
        version += 1
        if not isinstance(payload, dict):
            raise PermanentError(
                f"upcaster from version {version - 1} returned no JSON object", code=ErrorCode.PAYLOAD_INVALID
            )
    return payload


def decode_json(value: object) -> object:
    """``value`` decoded from JSON text, or as it is when the driver decoded it already."""
    # Django's psycopg backend leaves jsonb as text for JSONField to decode; a raw cursor sees that.
    return json.loads(value) if isinstance(value, str | bytes) else value
