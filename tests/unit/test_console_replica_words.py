"""What a page says of the replica it read from, and what its form carries of the jobs it showed:
pure values, no database."""

from __future__ import annotations

import math
import uuid

import pytest

from django_jobs.console import seen
from django_jobs.console.seen import Shown
from django_jobs.models import Job
from django_jobs.reads.replica import Lag
from django_jobs.states import JobStatus


def test_a_standby_that_replayed_all_it_received_is_caught_up_however_old_its_last_transaction() -> None:
    lag = Lag("replica", standby=True, caught_up=True, replayed_age=3600.0)  # an idle primary
    assert (str(lag), lag.seconds_behind, lag.gauge, lag.worrying) == ("caught up", 0.0, 0.0, False)


def test_a_standby_behind_is_behind_by_the_age_of_what_it_replayed_last() -> None:
    lag = Lag("replica", standby=True, caught_up=False, replayed_age=3.42)
    assert (str(lag), lag.gauge, lag.worrying) == ("3.4 s behind", 3.42, True)
    assert str(Lag("replica", standby=True, caught_up=False, replayed_age=754.4)) == "754 s behind"


@pytest.mark.parametrize(
    ("lag", "words"),
    [
        (Lag("replica", standby=True, caught_up=False, replayed_age=None), "replayed nothing"),
        (Lag("replica", standby=False, caught_up=False, replayed_age=None), "not a standby"),
        (Lag("replica", unreachable="connection refused"), "unreachable (connection refused)"),
    ],
    ids=["nothing replayed yet", "not in recovery", "unreachable"],
)
def test_a_lag_nobody_can_tell_is_said_and_is_nan_to_prometheus(lag: Lag, words: str) -> None:
    assert words in str(lag)
    assert lag.seconds_behind is None and math.isnan(lag.gauge) and lag.worrying


def test_what_a_page_showed_goes_through_its_form_unchanged() -> None:
    shown = [
        Shown(7, JobStatus.FAILED, uuid.uuid4(), 5, 0),
        Shown(8, JobStatus.CANCELLED, None, 0, 2),
    ]
    assert seen.decode(seen.encode(shown)) == {7: shown[0], 8: shown[1]}
    assert seen.decode("") == {}


@pytest.mark.parametrize(
    "text",
    [
        "7:failed",
        "7:exploded::0:0",
        "x:failed::0:0",
        "7:failed:not-a-uuid-at-all-but-36-chars-long:0:0",
        "7;drop",
    ],
)
def test_a_form_that_says_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a job as a page showed it"):
        seen.decode(text)


def _job(**fields: object) -> Job:
    values: dict[str, object] = {
        "id": 7, "status": JobStatus.FAILED, "execution_id": None, "attempts": 5, "manual_retries": 0,
    }  # fmt: skip
    return Job(**{**values, **fields})


@pytest.mark.parametrize(
    ("now", "says"),
    [
        (_job(status=JobStatus.PENDING, attempts=0, manual_retries=1), "it is pending now, not failed"),
        # Retried by someone else, and failed again: the status alone would not tell.
        (_job(attempts=1, manual_retries=1, execution_id=uuid.uuid4()), "retried by hand"),
        # Sent back to pending by a recovery, claimed and failed again, without a manual retry.
        (_job(attempts=6, execution_id=uuid.uuid4()), "ran again"),
    ],
    ids=["status", "manual retries", "execution"],
)
def test_a_job_that_moved_since_the_page_showed_it_says_how(now: Job, says: str) -> None:
    shown = Shown.of(_job())
    assert seen.change(shown, _job()) is None
    assert says in (seen.change(shown, now) or "")
