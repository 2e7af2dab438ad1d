from __future__ import annotations

from typing import Any

from django_jobs import JobContext, job


@job("test.noop", external=False)
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Does nothing: what is measured is the worker around it."""
