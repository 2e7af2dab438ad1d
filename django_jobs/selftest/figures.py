"""What a self-test run measured, and how it says it.

Every duration is the database's (its ``now()`` in the job and event rows, and read just after
each signal), as the reaper measures leases: a clock that drifts on the host running the
self-test changes none of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (not empty): ``fraction`` 0.5 is the median."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


@dataclass
class Figures:
    """The run's measurements, filled in as its steps go."""

    #: Seconds from an enqueue's commit to the claim, for jobs enqueued one at a time while
    #: the workers were idle: what a user waits for a job to start.
    claim_latency: list[float] = field(default_factory=list)
    #: Jobs per second through the run's workers, from the first enqueue to the last end.
    throughput: float | None = None
    #: Seconds from the SIGKILL of a worker to its job's recovery, and from the SIGSTOP.
    recovery_after_kill: float | None = None
    recovery_after_stop: float | None = None

    def latency(self) -> str:
        values = self.claim_latency
        if not values:
            return "not measured"
        return f"p50 {ms(percentile(values, 0.5))}, p95 {ms(percentile(values, 0.95))}, max {ms(max(values))}"

    def recovery(self) -> str:
        parts = []
        if self.recovery_after_kill is not None:
            parts.append(f"{self.recovery_after_kill:.1f} s after a SIGKILL")
        if self.recovery_after_stop is not None:
            parts.append(f"{self.recovery_after_stop:.1f} s after a SIGSTOP")
        return ", ".join(parts) or "not measured"

    def line(self, lease: float) -> str:
        """The figures in one line."""
        throughput = f"{self.throughput:,.0f} jobs/s" if self.throughput is not None else "not measured"
        return (
            f"figures: claim latency {self.latency()}; recovery {self.recovery()} "
            f"(lease {lease:g} s); throughput {throughput}"
        )
