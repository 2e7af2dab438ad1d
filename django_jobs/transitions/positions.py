"""Where a worker's claims stopped in each kind, so that its claims need not step over the jobs
claimed while vacuum is held back.

A claim takes a job by updating its row, and leaves the row's old version in the claim index,
still filed as pending. Normally that costs nothing: once no snapshot can see the old version,
the first scan that meets the entry marks it dead, and later scans skip it. While one snapshot
holds the vacuum horizon back (docs/scaling.md, "A held vacuum horizon"), no entry can be marked,
and a claim that reads a kind from its head steps over every job claimed since the snapshot
began, checking each in the table: at 500 jobs a second, 30,000 more every minute, for as long as
the snapshot lasts.

So every claim counts the entries it stepped over (the claim indexes' entries read, less the rows
they led to). When a claim that read every kind from its head (a *sweep*) stepped over more than
``DEAD_WALK_LIMIT``, the next claims read each kind from the last job this worker claimed there
(its place in the claim order: priority, due time, id): only what lies beyond it. A job that
appears before that place (of a higher priority, due earlier, given back, recovered, or whose
concurrency key or rate window just freed up) is found by the next sweep, which runs at least
every ``POLL_INTERVAL``, and at most once per ``SWEEP_COST_SHARE`` times its own duration: the
sweeps take at most a tenth of the claim loop's time, however long the hold. A sweep that
steps over fewer entries than the limit ends the mode.

A worker of named queues scans each queue's kinds, and remembers a place per queue and kind; a
worker of every queue, one per kind, except while a queue is paused: it then claims per queue,
from the heads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from django_jobs.conf import jobs_settings

#: A sweep that stepped over more dead claim-index entries than this turns positions on (about a
#: millisecond of the claim's time, at a microsecond or so an entry).
DEAD_WALK_LIMIT = 1_000
#: While positions are remembered, a sweep runs at most once per this many times its own
#: duration.
SWEEP_COST_SHARE = 10
#: No place: a priority above the allowed range (-100 … 100), so that the statement's arm for the
#: place's own priority matches nothing and its arm for lower priorities reads the whole kind.
_HEAD = (101, -math.inf, 0)

#: A kind: a job type and a payload version.
Kind = tuple[str, int]
#: A place in a kind's claim order: priority, due time (seconds since the epoch), id.
Place = tuple[int, float, int]


class ClaimPositions:
    """The places a worker's claims stopped, per kind, and when its next claim is a sweep."""

    def __init__(self, kinds: Sequence[Kind], queues: Sequence[str] | None = None) -> None:
        self._kinds = list(kinds)
        self._by_queue = bool(queues)
        self._places: dict[tuple[str | None, str, int], Place] = {}
        #: Whether claims start at the remembered places (the last sweep stepped over many).
        self.remembering = False
        #: Whether the last claim read every kind from its head.
        self.last_swept = True
        #: Dead claim-index entries the last claim stepped over, and the most of any sweep.
        self.walked = 0
        self.most_walked = 0
        #: Sweeps run, and claims that started at remembered places.
        self.sweeps = 0
        self.resumed = 0
        self._swept_at = -math.inf  # monotonic
        self._sweep_seconds = 0.0
        self._sweep_wanted = False

    def sweep_due(self, now: float | None = None) -> bool:
        """Whether the next claim reads every kind from its head."""
        if not self.remembering or self._sweep_wanted:
            return True
        now = time.monotonic() if now is None else now
        every = max(jobs_settings.POLL_INTERVAL, SWEEP_COST_SHARE * self._sweep_seconds)
        return now - self._swept_at >= every

    def want_sweep(self) -> None:
        """Make the next claim a sweep: a job is claimable that a claim from the places may not
        reach (the outlook found one due, or jobs were promoted with their earlier due times)."""
        self._sweep_wanted = True

    def params(self, queues: Sequence[str] = ()) -> dict[str, Any]:
        """The places as the statement reads them: arrays aligned with the worker's kinds; with
        named queues, an array of those per queue, in the order of ``queues`` (this claim's)."""
        if not self._by_queue:
            places = [self._places.get((None, *kind), _HEAD) for kind in self._kinds]
            return {
                "kind_fp": [place[0] for place in places],
                "kind_fa": [place[1] for place in places],
                "kind_fi": [place[2] for place in places],
            }
        grid = [[self._places.get((queue, *kind), _HEAD) for kind in self._kinds] for queue in queues]
        return {
            "kind_fp": [[place[0] for place in row] for row in grid],
            "kind_fa": [[place[1] for place in row] for row in grid],
            "kind_fi": [[place[2] for place in row] for row in grid],
        }

    def describe(self) -> str:
        """What the claims do now, for the worker's log when it changes."""
        if self.remembering:
            return (
                f"a claim stepped over {self.walked} dead index entries of jobs claimed earlier, not removed "
                "yet (`manage.py checkjobs` names a transaction that holds vacuum back, if one does); "
                "claims now start where this worker's last ones stopped, and read every job from the "
                f"start at least every {jobs_settings.POLL_INTERVAL}s"
            )
        return f"claims step over few dead index entries again ({self.walked}): each reads all from the start"

    def claimed(
        self,
        taken: Iterable[tuple[str, str, int, int, float, int]],
        *,
        walked: int,
        swept: bool,
        seconds: float,
    ) -> None:
        """Note a claim: ``taken`` are the (queue, type, version, priority, due time, id) of the
        jobs it took, in any order; ``walked`` the dead entries it stepped over; ``swept`` whether
        it read every kind from its head, in ``seconds``. The places are kept only while claims
        start from them: otherwise a claim costs nothing more than the counts."""
        self.walked = walked
        self.last_swept = swept
        if swept:
            self.sweeps += 1
            self.most_walked = max(self.most_walked, walked)
            self._sweep_wanted = False
            self._swept_at = time.monotonic()
            self._sweep_seconds = seconds
            self.remembering = walked > DEAD_WALK_LIMIT
            if not self.remembering:
                self._places.clear()
                return
        else:
            self.resumed += 1
        # Each kind's place is the furthest job this claim took in it, in the claim's order
        # (best priority first, then the longest due, then the id): a sweep that stopped short of
        # an earlier place moves it back, so the next claims read what the sweep left.
        furthest: dict[tuple[str | None, str, int], Place] = {}
        for queue, job_type, version, priority, due, job_id in taken:
            key = (queue if self._by_queue else None, job_type, version)
            best = furthest.get(key)
            if best is None or (-priority, due, job_id) > (-best[0], best[1], best[2]):
                furthest[key] = (priority, due, job_id)
        self._places.update(furthest)
