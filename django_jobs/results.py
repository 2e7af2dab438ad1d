"""Return values: what a handler (or a task) returned, checked and encoded for the job row.

A return value is stored as JSON on the completed job (``Job.return_value``), so that whoever
enqueued the work can read it later (``JobsBackend.get_result()``). It is bounded by
``MAX_RESULT_BYTES`` and must round-trip through jsonb unchanged; anything else raises
:class:`~django_jobs.errors.InvalidResult`, which ends the job ``failed`` like any permanent
error: the worker carries on, and the error says what was wrong with the value.
"""

from __future__ import annotations

from django_jobs.conf import jobs_settings
from django_jobs.errors import InvalidResult
from django_jobs.jsonvalues import bounded_problem, encode, plain_json_problem


def encode_result(value: object) -> str | None:
    """``value`` as JSON text for the job row, or None when the handler returned None.

    Raises ``InvalidResult`` for a value that is not plain JSON or is too large.
    """
    if value is None:
        return None  # by far the most common: no encoding, and NULL in the row
    problem = plain_json_problem(value, "return value")
    if problem is not None:
        raise InvalidResult(f"{problem}; return plain JSON (dict, list, str, int, float, bool, None)")
    encoded = encode(value)
    too_large = bounded_problem(encoded, "return value", "MAX_RESULT_BYTES", jobs_settings.MAX_RESULT_BYTES)
    if too_large is not None:
        raise InvalidResult(too_large)
    return encoded
