"""Claims racing for the last slot of a key or the last start of a rate window: never both win."""

from __future__ import annotations

import pytest

from django_jobs import enqueue_many
from django_jobs.limits import RateLimit
from django_jobs.models import ConcurrencyKey, Job, RateWindow
from django_jobs.transitions import Claim, ClaimStatement, Outcome, claim, open_rate_windows, write_outcomes
from tests.concurrency.test_claim_race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TYPES = {"test.keyed": 1, "test.keyed_once": 1, "test.rated": 1}


def statements(n: int, rates: dict[str, RateLimit] | None = None) -> list[ClaimStatement]:
    return [ClaimStatement(f"worker-{i}", None, TYPES, rate_limits=rates) for i in range(n)]


def winners(results: list[list[Claim]]) -> list[Claim]:
    return [c for claims in results for c in claims]


@pytest.mark.parametrize("key_row", ["new key", "known key"])
def test_claims_racing_for_the_one_slot_of_a_key_never_both_win(key_row: str) -> None:
    contenders = statements(4)
    for round_ in range(60):
        key = f"customer:{round_}"
        if key_row == "known key":  # the key's row exists, with nothing running
            ConcurrencyKey.objects.create(type="test.keyed_once", key=key)
        enqueue_many("test.keyed_once", [{}] * 4, concurrency_key=key)
        won = winners(race(4, lambda i: claim(contenders[i], 1)))
        assert len(won) == 1, f"round {round_}: {len(won)} claims started a job of {key}"
        assert Job.objects.filter(concurrency_key=key, status="running").count() == 1


def test_claims_racing_for_the_last_slots_of_a_key_never_exceed_the_limit() -> None:
    contenders = statements(6)
    for round_ in range(40):
        enqueue_many("test.keyed", [{"key": f"k{round_}"}] * 6)
        won = winners(race(6, lambda i: claim(contenders[i], 2)))
        assert 1 <= len(won) <= 2, f"round {round_}: {len(won)} started, the limit is 2"
        while more := claim(contenders[0], 2):
            won += more
        assert len(won) == 2, f"round {round_}: {len(won)} started, the limit is 2"
        write_outcomes([Outcome(c.id, c.execution_id, "completed") for c in won])
        Job.objects.filter(status="pending").delete()  # the next round races for a new key


def test_claims_racing_for_the_last_starts_of_a_window_never_exceed_the_limit() -> None:
    contenders = statements(6, {"test.rated": RateLimit(3, 3600)})
    open_rate_windows(["test.rated"])
    for round_ in range(40):
        RateWindow.objects.filter(type="test.rated").update(starts=[])
        Job.objects.filter(type="test.rated").delete()
        enqueue_many("test.rated", [{}] * 6)
        won = winners(race(6, lambda i: claim(contenders[i], 2)))
        # A claim passes over a window another claim holds: racing claims may take fewer.
        assert 1 <= len(won) <= 3, f"round {round_}: {len(won)} started, the window allows 3"
        while more := claim(contenders[0], 2):
            won += more
        assert len(won) == 3, f"round {round_}: {len(won)} started, the window allows 3"
        assert len(RateWindow.objects.get(type="test.rated").starts) == 3
