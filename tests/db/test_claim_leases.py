"""Each claimed job's lease is its own type's, whichever statement claimed it.

The claim carries each kind's lease from the kinds it scans to its UPDATE. A worker has six
statements (every queue, of few kinds or of many; from the places its claims stopped; beside a
paused queue; named queues; named queues from places), and the one with rate limits admits its
jobs differently: each must give every job its type's lease, for every version it reads.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_jobs import enqueue_many
from django_jobs.limits import RateLimit
from django_jobs.models import Job
from django_jobs.transitions import ClaimStatement, claim, open_rate_windows, pause_queue
from django_jobs.transitions.execution import MANY_KINDS
from django_jobs.transitions.positions import DEAD_WALK_LIMIT
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

# Leases far apart, so that no clock between the claim's now() and the read blurs them; the type
# without one gets LEASE_TIMEOUT (60 s in the test project).
LEASES = {"test.noop": 7.0, "test.keyed": 3000.0, "test.rated": 1234.5}
VERSIONS = {"test.noop": 2, "test.keyed": 1, "test.rated": 1, "test.keyed_once": 1}
OLDEST = {"test.noop": 1}  # two kinds of test.noop: versions 1 and 2
EXPECTED = {**LEASES, "test.keyed_once": 60.0}


def leases_of(ids: list[int]) -> dict[tuple[str, int], float]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, version, extract(epoch FROM lease_expires_at - heartbeat_at)::float8"
            " FROM django_jobs_job WHERE id = ANY(%s)",
            [ids],
        )
        return {(type_, version): seconds for type_, version, seconds in cursor.fetchall()}


def fill(queue: str = "default") -> None:
    JobFactory(type="test.noop", version=1, queue=queue, ready=True)
    JobFactory(type="test.noop", version=2, queue=queue, ready=True)
    enqueue_many("test.keyed", [{"key": "a"}], queue=queue)
    enqueue_many("test.keyed_once", [{}], queue=queue)
    enqueue_many("test.rated", [{}], queue=queue)


@pytest.mark.parametrize("rated", [False, True])
@pytest.mark.parametrize(
    "variant", ["usual", "many kinds", "from places", "beside paused", "named", "named from places"]
)
def test_every_claim_statement_gives_each_job_its_types_lease(variant: str, rated: bool) -> None:
    named = variant.startswith("named")
    fill()
    if variant == "beside paused":
        fill("paused")
        pause_queue("paused", actor="test", reason="its backlog stays")
    versions = dict(VERSIONS)
    if variant == "many kinds":  # the claim that first walks the kinds with ready jobs
        versions.update({f"other.t{i:03d}": 1 for i in range(MANY_KINDS)})
    statement = ClaimStatement(
        "w",
        ["default"] if named else None,
        versions,
        leases=LEASES,
        oldest=OLDEST,
        rate_limits={"test.rated": RateLimit(100, 60.0)} if rated else None,
    )
    open_rate_windows(statement.rate_limited)
    statement.queues_paused = variant == "beside paused"
    assert ("live AS" in statement.sql) == (variant in ("many kinds", "beside paused"))
    if variant.endswith("from places"):
        # Claims that stepped over many dead entries make the next one read from their places.
        statement.positions.claimed([], walked=DEAD_WALK_LIMIT + 1, swept=True, seconds=0.0)
        assert statement.sql_from_places() is not None
    claims = claim(statement, 10)
    assert {c.queue for c in claims} == {"default"}
    leases = leases_of([c.id for c in claims])
    assert sorted(leases) == sorted(
        [("test.noop", 1), ("test.noop", 2), ("test.keyed", 1), ("test.keyed_once", 1), ("test.rated", 1)]
    )
    for (type_, _version), seconds in leases.items():
        assert seconds == pytest.approx(EXPECTED[type_], abs=1e-6), type_
    assert Job.objects.filter(queue="default", status="pending").count() == 0
