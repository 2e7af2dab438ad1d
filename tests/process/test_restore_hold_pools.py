"""A restore hold declared while `runjobs` runs: whichever pool runs the handlers, a job of an
external type that the worker claimed before it knew of the hold is given back unstarted.

The worker's claims leave such jobs alone once its look has seen the hold; until then (a look
every `HEARTBEAT_INTERVAL`) the slot that would start one asks the database first. Threads and
child processes start jobs through the same path, so both must hold it.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from django.db import transaction

from django_jobs import enqueue
from django_jobs.console import restore_holds
from django_jobs.models import DatabaseIdentity, Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.process.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: A look at start and one at the heartbeat's first report, then none for a long while: the job
#: below is claimed by a worker that has not looked since the hold opened.
SLOW_LOOKS = {"DJANGO_JOBS_HEARTBEAT_INTERVAL": "30", "DJANGO_JOBS_LEASE_TIMEOUT": "90"}


def _generation() -> int:
    recorded = DatabaseIdentity.objects.first()
    return 0 if recorded is None else recorded.generation


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_an_external_job_claimed_as_a_hold_opens_is_given_back_unstarted_by_every_pool(
    pool: str, worker_env: dict[str, str], tmp_path: Path
) -> None:
    record = tmp_path / "provider"
    looked = _generation()
    worker = WorkerProcess({**worker_env, **SLOW_LOOKS}, "--pool", pool, "--concurrency", "1")
    try:
        wait_for(lambda: _generation() >= looked + 2, timeout=60, what="the worker's first looks")
        with transaction.atomic():  # the worker hears of the job as the hold opens
            job = enqueue("test.provider_notice", {"record": str(record), "operation": "n1"})
            restore_holds.declare(actor="ops", reason="restored last night's base backup")
        wait_for(
            lambda: JobEvent.objects.filter(job_id=job.id, kind=EventKind.RELEASED).exists()
            or Job.objects.get(id=job.id).status == JobStatus.COMPLETED,
            timeout=30,
            what="the claimed job to be given back (or, wrongly, to run)",
        )
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0
        output = worker.output()
    finally:
        worker.stop()
    job = Job.objects.get(id=job.id)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
    assert not record.exists(), "the provider was called while the hold was open"
    assert "a restore hold is open: jobs of external types wait" in output
    assert _generation() == looked + 2  # no look saw the hold: the slot's own check did
