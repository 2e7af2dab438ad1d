"""The job type of the worker-host tests (tests/process/test_worker_hosts.py).

It is registered only by the worker hosts' command (``tests.process.host_runjobs``), not by the
test project every other test loads, so no other test sees one more type.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django_jobs import Backoff, JobContext, job
from testproject.testjobs.models import EffectLog
from tests.process.hosts import HOST_VARIABLE


@job("hosts.counted_effect", backoff=Backoff(base=0.05, cap=0.2, jitter=0.5), max_attempts=50, external=False)
def counted_effect(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Counts its start in a file of its host, works for ``payload["pause"]`` seconds, then makes
    its business effect through the effect ledger.

    The file is the record the database cannot keep: a worker cut off from it still writes
    there what it started, and when. The effect, an ``EffectLog`` row (no constraint of its own),
    is kept single by the ledger alone, so a second effect would show as a second row.
    """
    starts = Path(payload["log_dir"]) / f"{os.environ[HOST_VARIABLE]}.starts"
    with open(starts, "a") as record:  # one short write per start: lines never interleave
        record.write(f"{ctx.job_id} {ctx.execution_id} {time.time():.3f}\n")
    time.sleep(payload.get("pause", 0))
    key = f"hosts:{payload['n']}"
    with ctx.effect(key) as first_time:
        if first_time:
            EffectLog.objects.create(key=key, execution_id=ctx.execution_id)
