"""The claim's rule as a read: which pending jobs a process could claim now, in the claim's order.

``Job.objects.claimable()`` filters with the claim's own rule: the conditions a pending row must
meet (due, room under its key and rate window, queue not paused: ``_ROW_CONDITIONS``, word for
word as the claim checks them) and the kinds the claim scans one by one (a known type and a
payload version it reads), as one filter over the same per-type arrays. So the console, users'
tests and a diagnosis read the rule workers claim by, and a change to the claim's conditions
changes this read with it (a test holds the two texts together, and another compares what each
finds on a mixed table). A job scheduled for later that is due but not promoted yet is
claimable: the next claim of its kind promotes it and takes it.

The job types come from the caller (the registered ones, ``registry.among(types)``): this layer
does not read the registry, so what a process may claim is always its caller's argument.

The read sees what the claim's candidate scan sees. The claim then decides two things under
locks, which no read can: the running count of a concurrency key after its row is locked, and
the starts left in a rate window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django_jobs.limits import RateLimit
from django_jobs.transitions.execution import (
    _CLAIM_FILTER,
    _KEY_ROOM_FILTER,
    _OLDEST_FILTER,
    _RATE_ROOM_FILTER,
    _ROW_CONDITIONS,
    ClaimStatement,
)

#: The claim's order (``ORDER BY priority DESC, available_at, id``): best priority first, then
#: the longest due. A worker serving several named queues takes them in turns, each in this order.
CLAIM_ORDER = ("-priority", "available_at", "id")

_NAMED_PARAMETER = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class ClaimInputs:
    """What a claim needs to know of the job types a process runs: the newest payload version
    each can read, the oldest its upcasters reach, its lease, and its rate limit if any."""

    versions: dict[str, int]
    leases: dict[str, float] = field(default_factory=dict)
    oldest: dict[str, int] = field(default_factory=dict)
    rate_limits: dict[str, RateLimit] = field(default_factory=dict)


class ClaimPolicy(Protocol):
    """What the claim reads of a job type (``django_jobs.registry.JobType`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def lease(self) -> float: ...
    @property
    def oldest_readable_version(self) -> int: ...
    @property
    def rate_limit(self) -> RateLimit | None: ...


def claim_inputs(job_types: Iterable[ClaimPolicy]) -> ClaimInputs:
    """The claim inputs of ``job_types``: those a process has handlers for, so that a type it
    cannot run is never claimed (``registry.among(types)`` gives them)."""
    known = list(job_types)
    return ClaimInputs(
        versions={t.name: t.version for t in known},
        leases={t.name: t.lease for t in known},
        oldest={t.name: t.oldest_readable_version for t in known},
        rate_limits={t.name: t.rate_limit for t in known if t.rate_limit},
    )


def claim_statement(
    worker_id: str, queues: Sequence[str] | None, job_types: Iterable[ClaimPolicy]
) -> ClaimStatement:
    """The claim statement of a worker that runs ``job_types`` from ``queues`` (None: all)."""
    inputs = claim_inputs(job_types)
    return ClaimStatement(
        worker_id, queues, inputs.versions, inputs.leases, inputs.oldest, inputs.rate_limits
    )


def claim_filter(inputs: ClaimInputs) -> tuple[str, dict[str, Any]]:
    """The claim's WHERE clause for these inputs, with its named parameters.

    Composed exactly as ``ClaimStatement`` composes it, so that its text is found verbatim in
    the claim statement built from the same inputs.
    """
    names = sorted(inputs.versions)
    gaps = any(inputs.oldest.get(name, 1) > 1 for name in names)
    rates = {name: limit for name, limit in inputs.rate_limits.items() if name in inputs.versions}
    room = _KEY_ROOM_FILTER + (_RATE_ROOM_FILTER if rates else "")
    sql = _CLAIM_FILTER.replace("{oldest_filter}", _OLDEST_FILTER if gaps else "")
    sql = sql.replace("{room_filters}", room)
    assert row_conditions(inputs) in sql
    params: dict[str, Any] = {
        "types": names,
        "versions": [inputs.versions[name] for name in names],
        "newest": max(inputs.versions.values(), default=0),
        "oldest": [inputs.oldest.get(name, 1) for name in names],
    }
    if rates:
        rated = sorted(rates)
        params.update(
            rate_types=rated,
            rate_counts=[rates[name].count for name in rated],
            rate_seconds=[rates[name].seconds for name in rated],
        )
    return sql, params


def row_conditions(inputs: ClaimInputs) -> str:
    """The conditions on a pending row (due, room under its key and rate window, queue not
    paused), as the claim checks them when it scans a row, and as ``claim_filter`` ends."""
    rates = any(name in inputs.versions for name in inputs.rate_limits)
    return _ROW_CONDITIONS.replace("{room_filters}", _KEY_ROOM_FILTER + (_RATE_ROOM_FILTER if rates else ""))


def positional(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """``sql`` with its ``%(name)s`` parameters turned into ``%s`` and their values in order,
    as Django's ``RawSQL`` takes them."""
    values: list[Any] = []

    def take(match: re.Match[str]) -> str:
        values.append(params[match[1]])
        return "%s"

    return _NAMED_PARAMETER.sub(take, sql), values
