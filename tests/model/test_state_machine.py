"""The whole state machine, as a stateful property test on real PostgreSQL.

Hypothesis draws sequences of every writer of a job's state — enqueue (plain, keyed, debounced,
with a start-by deadline, chains, groups with callbacks, nested), a deadline passing and the
reaper's pass that ends the pending jobs past it, a worker's claim (past a job's deadline, its
start ends it instead) and each handler outcome, a lease lost and the reaper's recovery, an
operator's retry / cancel / resolve of one job, a multi-select in any order, a bulk operation
by filter with batches of any size, a workflow's cancel, retention with rows aged past it, a
restore hold declared and released with answers, a queue paused and resumed, a durable handler
that sleeps or waits, a webhook's signal (committed or rolled back), a sleep ended by hand —
and after every step compares the database with the reference model
(:mod:`tests.model.model`): the docs' arrows, workflows' barriers, operators' cancels, restore
holds, ``explainjob``'s reasons, retention's wholeness.

Time is the database's: nothing is mocked; the only rows written by hand are test data (a
lease moved into the past, a finished job aged past its retention).

In the normal run it draws a bounded number of examples; ``DJANGO_JOBS_SOAK=<seconds>`` (or
``./run test --soak=<seconds>``) draws examples until that many seconds have passed.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import itertools
import os
import sys
import time
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import django_jobs
from django_jobs import ActionRefused, Chain, Group, JobFilter, Step
from django_jobs.console import actions, bulk_runner, durable_actions, restore_holds
from django_jobs.durable import give_key
from django_jobs.errors import ErrorCode
from django_jobs.maintenance import pruner, reaper, rescuer
from django_jobs.models import Job, JobEvent, JobStep, SignalKey, WorkflowStep
from django_jobs.observe.diagnosis import explain
from django_jobs.observe.reasons import Reason
from django_jobs.states import EventKind
from django_jobs.testing import where
from django_jobs.transitions import KeyHeld
from django_jobs.transitions import durable as durable_records
from testproject.testjobs import jobs as testjobs
from tests.model import driver
from tests.model.model import ACTOR, MJob, Model
from tests.model.shapes import (
    ENDED_STATUSES,
    EXTERNAL,
    KEYS,
    QUEUES,
    TYPES,
    expected_waits,
    workflows,
)

#: Seconds each status is kept (the defaults: testproject sets none).
RETENTION = {"completed": 7 * 86400, "skipped": 7 * 86400, "cancelled": 30 * 86400, "failed": None}
AGES = (86400, 10 * 86400, 40 * 86400)
OUTCOMES = ("complete", "complete", "retry", "ambiguous", "permanent", "skip", "cancelled", "sleep", "wait")
REASON = "the model says so"
DEBOUNCE_KEYS = ("d1", "d2")
DEBOUNCE_WINDOW = 30.0

#: Known rules (model.KNOWN) whose breaches are counted, not failed: only to explore today's code.
TOLERATED = frozenset(filter(None, os.environ.get("DJANGO_JOBS_MODEL_TOLERATE", "").split(",")))
#: Steps and examples run in this process, for the log.
COUNTS: collections.Counter[str] = collections.Counter()


class _RolledBack(Exception):
    """The model's webhook fails after sending its signal: its transaction rolls back."""


def _due_later(job_id: int) -> bool:
    return Job.objects.filter(id=job_id, available_at__gt=Now()).exists()


def _statuses(ids: Any = None) -> dict[int, str]:
    rows = Job.objects.all() if ids is None else Job.objects.filter(id__in=list(ids))
    return dict(rows.values_list("id", "status"))


class JobsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        driver.clean_database()
        testjobs.MODEL_SCRIPT.clear()
        testjobs.MODEL_RECONCILE.clear()
        testjobs.MODEL_STARTS.clear()
        self.model = Model(tolerated=TOLERATED)
        self.inflight: list[driver.InFlight] = []
        #: Whether a retry was refused for a unique key during the way being compared.
        self.key_refused = False
        self.operations: list[int] = []
        #: The jobs enqueued with a start-by deadline, and those debounced.
        self.deadlines: list[int] = []
        self.debounced: list[int] = []
        self.edits = itertools.count(1)
        COUNTS["examples"] += 1

    # ---- helpers ------------------------------------------------------------------------------

    def _keys(self) -> dict[tuple[str, str], list[int]]:
        keys: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
        for job in self.model.jobs.values():
            if job.key is not None:
                keys[(job.type, job.key)].append(job.id)
        return keys

    def _pick(self, data: st.DataObject, among: Any, label: str) -> int:
        return data.draw(st.sampled_from(sorted(among)), label=label)

    def _retry_one(self, job_id: int) -> None:
        """An operator's retry, checked against the intended rules before and after."""
        model = self.model
        job = model.jobs[job_id]
        statuses = _statuses()
        status = statuses[job_id]
        keys = self._keys()
        expected = (
            model.runs_when_ended(job, statuses)
            if status in ("failed", "cancelled", "needs_review")
            else "refused"
        )
        holder = model.key_holder(job, statuses, keys)
        stopped = set(WorkflowStep.objects.filter(stopped=True).values_list("job_id", flat=True))
        # The stopped steps this retry resumes: those waiting on it, then those waiting on them.
        resumed: list[MJob] = []
        reach = [job_id]
        while reach:
            for s in model.downstream(reach.pop()):
                taken = s.id in {r.id for r in resumed}
                if s.id in stopped and statuses.get(s.id) == "cancelled" and not taken:
                    resumed.append(s)
                    reach.append(s.id)
        blocked = [(s.id, model.key_holder(s, statuses, keys)) for s in resumed]
        blocked = [(s, h) for s, h in blocked if h is not None]
        try:
            left = django_jobs.retry(job_id, reason=REASON, actor=ACTOR)
        except KeyHeld as exc:
            self.key_refused = True
            if holder is None and not blocked:
                model.fail(f"retry of job {job_id} refused for a key nobody else holds: {exc}")
            elif holder is None:
                step, other = blocked[0]
                if str(step) not in str(exc) or str(other) not in str(exc):
                    model.fail(
                        f"retry of job {job_id} refused without naming the stopped step {step} whose key "
                        f"job {other} holds: {exc}",
                        "key-held",
                    )
            return
        except ActionRefused as exc:
            if expected != "refused" and holder is None and not blocked:
                model.fail(
                    f"retry of job {job_id} ({status}) refused, expected {expected}: {exc}", "retry-step"
                )
            return
        now = _statuses()
        if expected == "refused":
            waited = sorted((w, statuses[w]) for w in job.waits)
            model.fail(
                f"retry of job {job_id} ({left}, {job.role}, runs if {job.runs_if}) was not refused: it is "
                f"{now[job_id]}, while the jobs it waits for are {waited}",
                "retry-step",
            )
        elif holder is not None or blocked:
            model.fail(
                f"retry of job {job_id} made it {now[job_id]} although a key is held: {holder} {blocked}",
                "key-held",
            )
        elif now[job_id] != expected:
            model.fail(
                f"retry of job {job_id} ({left}) made it {now[job_id]}, expected {expected}: the jobs it "
                f"waits for are {sorted((w, statuses[w]) for w in job.waits)}",
                "retry-step",
            )
        for step in resumed:
            if now.get(step.id) != "waiting":
                model.fail(
                    f"retry of job {job_id} left the step it stopped, job {step.id}, {now.get(step.id)}"
                )

    def _cancel_one(self, job_id: int) -> None:
        before = Job.objects.get(id=job_id)
        try:
            result = django_jobs.cancel(job_id, reason=REASON, actor=ACTOR)
        except ActionRefused:
            if before.status in ("waiting", "pending") or (
                before.status == "running" and before.cancel_requested_at is None
            ):
                self.model.fail(f"cancel of job {job_id} ({before.status}) refused")
            return
        expected = "requested" if before.status == "running" else "cancelled"
        if result != expected:
            self.model.fail(f"cancel of job {job_id} ({before.status}) said {result}")

    def _snapshot(self, with_stopped: bool) -> dict[int, tuple[str, bool]]:
        stopped = dict(WorkflowStep.objects.values_list("job_id", "stopped")) if with_stopped else {}
        return {i: (s, stopped.get(i, False)) for i, s in _statuses(self.model.jobs).items()}

    def _compare(
        self,
        what: str,
        runs: list[tuple[str, Any]],
        stopped: bool = True,
        parked_or_cancelled: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        """Run each way in a savepoint rolled back, but the last; the outcomes must agree (the
        jobs of ``parked_or_cancelled`` may end needs_review in one way and cancelled in another)."""
        seen = []
        key_refused = False
        with transaction.atomic():
            for i, (label, way) in enumerate(runs):
                point = connection.savepoint()
                self.key_refused = False
                way()
                key_refused = key_refused or self.key_refused
                seen.append((label, self._snapshot(stopped)))
                if i < len(runs) - 1:
                    connection.savepoint_rollback(point)
                else:
                    connection.savepoint_commit(point)
        if key_refused:
            # One unique key wanted by two of the jobs these retries make live (their own, or
            # that of a stopped step they resume): the first retried takes it and the other is
            # refused, by the documented key rule, whatever the order.
            return
        (first_label, first), *others = seen
        for label, other in others:
            if other != first:
                differ = {
                    i: (first.get(i), other.get(i))
                    for i in set(first) | set(other)
                    if first.get(i) != other.get(i)
                    and not (
                        i in parked_or_cancelled
                        and {first[i][0], other[i][0]} == {"needs_review", "cancelled"}
                    )
                }
                if not differ:
                    continue
                self.model.fail(f"{what}: {first_label} and {label} end differently: {differ}", "order")

    # ---- enqueue ------------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(TYPES),
        queue=st.sampled_from(QUEUES),
        key=st.one_of(st.none(), st.sampled_from(KEYS)),
        deadline=st.booleans(),
    )
    def enqueue(self, kind: str, queue: str, key: str | None, deadline: bool) -> None:
        COUNTS["steps"] += 1
        # A job with a deadline goes first in its queue: the claim of its queue takes it.
        expires_in, priority = (3600, 10) if deadline else (None, 0)
        job = django_jobs.enqueue(
            kind, {}, queue=queue, unique_key=key, expires_in=expires_in, priority=priority
        )
        if job.id not in self.model.jobs:
            self.model.jobs[job.id] = MJob(job.id, kind, queue, key, cursor=job.status)
            if deadline:
                self.deadlines.append(job.id)

    @rule(
        kind=st.sampled_from(TYPES),
        key=st.sampled_from(DEBOUNCE_KEYS),
        keep=st.sampled_from(["last", "first"]),
    )
    def enqueue_debounced(self, kind: str, key: str, keep: str) -> None:
        """A debounced enqueue updates the pending job of its key that never started, or makes
        one: never two such jobs of a key, never an update of a job that started."""
        COUNTS["steps"] += 1
        waiting = list(
            Job.objects.filter(type=kind, debounce_key=key, status="pending", attempts=0).values_list(
                "id", "payload"
            )
        )
        payload = {"edit": next(self.edits)}
        job = django_jobs.enqueue(
            kind, payload, debounce=DEBOUNCE_WINDOW, debounce_key=key, debounce_keep=keep
        )
        stored = Job.objects.get(id=job.id)
        if waiting:
            (held, first), *_ = waiting
            if job.id != held:
                self.model.fail(f"debounce of {kind} {key} gave job {job.id}, while {waiting} waited")
            if stored.payload != (payload if keep == "last" else first):
                self.model.fail(f"debounce ({keep}) of job {job.id} left payload {stored.payload}")
            return
        if job.id in self.model.jobs or stored.status != "pending":
            self.model.fail(f"debounce of {kind} {key} with no job waiting returned job {job.id}")
        self.model.jobs[job.id] = MJob(job.id, kind, job.queue, None, cursor="pending")
        self.debounced.append(job.id)

    @precondition(lambda self: bool(self.debounced))
    @rule(data=st.data())
    def debounce_window_passes(self, data: st.DataObject) -> None:
        """Test data: a debounced job's window is over (its due time moved into the past)."""
        COUNTS["steps"] += 1
        job_id = self._pick(data, self.debounced, "debounced")
        Job.objects.filter(id=job_id, status="pending").update(available_at=Now() - dt.timedelta(seconds=1))

    @precondition(lambda self: bool(self.deadlines))
    @rule(data=st.data())
    def deadline_passes(self, data: st.DataObject) -> None:
        """Test data: a job's start-by deadline is now in the past (an operator's retry lifted it
        if it is NULL: nothing to move)."""
        COUNTS["steps"] += 1
        # A claimed one first, when there is one: its deadline passes while it waits in a buffer.
        claimed = sorted({f.job_id for f in self.inflight} & set(self.deadlines))
        job_id = self._pick(data, claimed or self.deadlines, "deadline")
        Job.objects.filter(id=job_id, start_by__isnull=False).update(start_by=Now() - dt.timedelta(seconds=1))
        COUNTS["deadlines passed"] += 1

    @precondition(lambda self: bool(self.deadlines))
    @rule(data=st.data())
    def claimed_then_deadline_passes(self, data: st.DataObject) -> None:
        """A worker claims from the queue of a job with a deadline, and the deadline passes
        while the claimed job waits in its buffer (test data): its start must end it."""
        COUNTS["steps"] += 1
        pending = Job.objects.filter(id__in=self.deadlines, status="pending", start_by__isnull=False)
        waiting = sorted(pending.values_list("id", flat=True))
        if not waiting:
            return
        job = self.model.jobs[self._pick(data, waiting, "deadline")]
        Job.objects.filter(id=job.id).update(available_at=Now() - dt.timedelta(seconds=1))  # due now
        before = len(self.inflight)
        self.claim((job.queue,))
        taken = {f.job_id for f in self.inflight[before:]}
        moved = Job.objects.filter(id__in=taken, start_by__isnull=False).update(
            start_by=Now() - dt.timedelta(seconds=1)
        )
        COUNTS["late claims"] += moved
        for flight in [f for f in self.inflight[before:] if f.job_id in taken]:
            self.inflight.remove(flight)
            self._start_flight(flight)

    def _start_flight(self, flight: driver.InFlight) -> None:
        """Start a claimed job; if its execution owned it past its deadline, the start ended it
        EXPIRED and its handler never ran."""
        claim = flight.held.claim
        owned_late = Job.objects.filter(
            id=claim.id, execution_id=claim.execution_id, status="running", start_by__lt=Now()
        ).exists()
        started = len(testjobs.MODEL_STARTS)
        driver.execute(flight)
        if not owned_late:
            return
        COUNTS["late starts checked"] += 1
        if any(job_id == claim.id for job_id, _ in testjobs.MODEL_STARTS[started:]):
            self.model.fail(f"job {claim.id}, past its start-by deadline, started")
        ended = Job.objects.filter(id=claim.id).values_list("status", "last_error_code").first()
        if ended != ("cancelled", ErrorCode.EXPIRED):
            self.model.fail(f"job {claim.id}, claimed past its start-by deadline, ended {ended}")

    @rule()
    def reap_expired(self) -> None:
        """The reaper's pass ends exactly the pending jobs past their deadline, as EXPIRED."""
        COUNTS["steps"] += 1
        late = set(Job.objects.filter(status="pending", start_by__lt=Now()).values_list("id", flat=True))
        before = _statuses()
        reaper.expire()
        after = Job.objects.filter(id__in=list(before)).values_list("id", "status", "last_error_code")
        moved = {i: (s, code) for i, s, code in after if before[i] != s}
        if set(moved) != late or any(v != ("cancelled", ErrorCode.EXPIRED) for v in moved.values()):
            self.model.fail(f"the reaper's expiry moved {moved}, expected {sorted(late)} cancelled EXPIRED")

    @rule(shape=workflows())
    def enqueue_workflow(self, shape: tuple[object, dict[str, Step | None]]) -> None:
        COUNTS["steps"] += 1
        root, callbacks = shape
        try:
            if isinstance(root, Group):
                workflow = django_jobs.enqueue_group(root.members, **callbacks)
            elif isinstance(root, Chain) and not any(callbacks.values()):
                workflow = django_jobs.enqueue_chain(*root.parts, on_failure=root.on_failure)
            else:
                workflow = django_jobs.enqueue_workflow(root, callbacks=callbacks)
        except django_jobs.InvalidWorkflow as exc:
            if "unique key" not in str(exc):  # a key held refuses it whole; nothing else may
                raise
            return
        waits = expected_waits(root, callbacks)
        rows = list(
            Job.objects.filter(workflow_id=workflow.id)
            .order_by("step__position")
            .values_list("id", "type", "queue", "unique_key", "status", "step__runs_if", "step__role")
        )
        assert len(rows) == len(waits), (rows, waits)
        ids = [row[0] for row in rows]
        for (job_id, kind, queue, key, status, runs_if, role), wait in zip(rows, waits, strict=True):
            assert (runs_if, role) == (wait.runs_if, wait.role), (runs_if, role, wait)
            assert status == ("waiting" if wait.on else "pending"), (job_id, status, wait)
            self.model.jobs[job_id] = MJob(
                job_id, kind, queue, key, workflow.id, frozenset(ids[p] for p in wait.on), wait.runs_if,
                wait.role, cursor=status, entered_waiting=int(status == "waiting"),
            )  # fmt: skip
        self.model.workflows[workflow.id] = ids

    # ---- workers ------------------------------------------------------------------------------

    @rule(queues=st.sampled_from([QUEUES, QUEUES[:1], QUEUES[1:]]))
    def claim(self, queues: tuple[str, ...]) -> None:
        COUNTS["steps"] += 1
        statuses = _statuses()
        for flight in driver.claim(queues):
            self.inflight.append(flight)
            job = self.model.jobs.get(flight.job_id)
            if job is None:
                continue
            if job.queue in self.model.paused:
                self.model.fail(f"job {job.id} claimed from paused queue {job.queue}")
            if job.id in self.model.op_cancelled:
                self.model.fail(f"job {job.id}, cancelled by an operator and not retried, was claimed")
            if job.type in EXTERNAL and self.model.hold is not None:
                self.model.fail(f"job {job.id} of external type {job.type} claimed under a restore hold")
            if job.runs_if == "succeeded" and job.waits:
                waited = sorted((w, statuses.get(w)) for w in job.waits)
                if any(s not in ("completed", "skipped") for _, s in waited):
                    # Through an operator's retry that should have been refused, or otherwise.
                    self.model.fail(
                        f"job {job.id} claimed while the jobs it waits for are {waited}",
                        "retry-step" if job.retried else None,
                    )

    @precondition(lambda self: bool(self.inflight))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(OUTCOMES),
        answer=st.sampled_from(["not_done", "done", "unknown"]),
    )
    def execute(self, data: st.DataObject, outcome: str, answer: str) -> None:
        COUNTS["steps"] += 1
        flight = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1), label="flight"))
        testjobs.MODEL_SCRIPT[flight.job_id] = outcome
        testjobs.MODEL_RECONCILE[flight.job_id] = answer
        started = len(testjobs.MODEL_STARTS)
        held = self.model.hold is not None
        self._start_flight(flight)
        self._check_suspension(flight)
        testjobs.MODEL_SCRIPT.pop(flight.job_id, None)
        testjobs.MODEL_RECONCILE.pop(flight.job_id, None)
        for job_id, kind in testjobs.MODEL_STARTS[started:]:
            if held and kind in EXTERNAL:
                self.model.fail(f"job {job_id} of external type {kind} started under a restore hold")

    def _check_suspension(self, flight: driver.InFlight) -> None:
        """A durable handler that slept or waits left its job pending, not due, its attempt
        not used (docs/durable-jobs.md)."""
        claim = flight.held.claim
        last = (
            JobEvent.objects.filter(job_id=claim.id, execution_id=claim.execution_id).order_by("-id").first()
        )
        if last is None or last.kind != "suspended":
            return
        row = Job.objects.filter(id=claim.id).values("status", "attempts", "ready").first()
        if row is None or (row["status"], row["attempts"], row["ready"]) != (
            "pending",
            claim.attempt - 1,
            False,
        ):
            self.model.fail(f"job {claim.id} suspended by its handler is {row}, not pending later uncounted")

    # ---- durable jobs: a webhook's signal, a sleep ended by hand --------------------------------

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data(), rolled_back=st.booleans(), by_operator=st.booleans())
    def signal(self, data: st.DataObject, rolled_back: bool, by_operator: bool) -> None:
        """A webhook signals a job (its key given on first use), or an operator does by its id,
        in a transaction that commits or rolls back: the job's status never changes; a job
        parked waiting for the signal is due at once when it commits, and stays parked when it
        rolls back. The operator's signal is refused for a job that has ended, and recorded
        (``signal_sent``) exactly when it commits."""
        COUNTS["steps"] += 1
        parked_ids = set(
            JobStep.objects.filter(kind="wait", ended_at__isnull=True).values_list("job_id", flat=True)
        )
        waiting_ids = sorted(parked_ids & set(self.model.jobs))
        among = (
            waiting_ids
            if waiting_ids and data.draw(st.booleans(), label="a waiting one")
            else self.model.jobs
        )
        job_id = self._pick(data, sorted(among), "signalled")
        key = f"model:{job_id}"
        if not SignalKey.objects.filter(job_id=job_id).exists():
            give_key(job_id, key)
        before = _statuses([job_id]).get(job_id)
        parked = where(job_id)
        was_later = _due_later(job_id)
        recorded = JobEvent.objects.filter(job_id=job_id, kind=EventKind.SIGNAL_SENT).count()
        refused = False
        with contextlib.suppress(_RolledBack), transaction.atomic():
            if by_operator:
                try:
                    durable_actions.send_signal(
                        job_id, "go", {"by": "operator"}, reason="model", actor="model"
                    )
                except ActionRefused:
                    refused = True
            else:
                django_jobs.signal(key, "go", {"by": "model"})
            if rolled_back:
                raise _RolledBack
        if by_operator and refused != (before not in ("pending", "running", "waiting")):
            self.model.fail(f"an operator's signal to job {job_id} ({before}) refused: {refused}")
        now_recorded = JobEvent.objects.filter(job_id=job_id, kind=EventKind.SIGNAL_SENT).count()
        if now_recorded != recorded + (by_operator and not refused and not rolled_back):
            self.model.fail(
                f"the operator's signal to job {job_id} recorded {now_recorded - recorded} events"
            )
        after = _statuses([job_id]).get(job_id)
        if after != before:
            self.model.fail(f"a signal moved job {job_id} from {before} to {after}")
        # Parked in its wait and not due yet (a signal sent earlier may have made it due already).
        waiting = parked is not None and parked.kind == "wait" and before == "pending" and was_later
        now_parked = where(job_id)
        if waiting and not rolled_back and now_parked is not None and _due_later(job_id):
            self.model.fail(f"job {job_id} waits for the signal it was sent, and is not due")
        if waiting and rolled_back and (now_parked is None or not _due_later(job_id)):
            self.model.fail(f"a rolled-back signal woke job {job_id}")

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data(), by_operator=st.booleans())
    def wake(self, data: st.DataObject, by_operator: bool) -> None:
        """A sleeping job woken by hand (a test's ``wake``, or an operator's, audited): due now,
        its status unchanged; any other, untouched, and the operator's wake refused."""
        COUNTS["steps"] += 1
        sleeping_ids = set(
            JobStep.objects.filter(kind="sleep", until__gt=Now()).values_list("job_id", flat=True)
        )
        asleep = sorted(sleeping_ids & set(self.model.jobs))
        among = asleep if asleep and data.draw(st.booleans(), label="a sleeping one") else self.model.jobs
        job_id = self._pick(data, sorted(among), "woken")
        before = Job.objects.filter(id=job_id).values_list("status", "available_at").first()
        parked = where(job_id)
        recorded = JobEvent.objects.filter(job_id=job_id, kind=EventKind.WOKEN).count()
        if by_operator:
            try:
                durable_actions.wake(job_id, reason="model", actor="model")
                woke = True
            except ActionRefused:
                woke = False
        else:
            woke = durable_records.wake(job_id)
        now_recorded = JobEvent.objects.filter(job_id=job_id, kind=EventKind.WOKEN).count()
        if now_recorded != recorded + (by_operator and woke):
            self.model.fail(
                f"a wake of job {job_id} recorded {now_recorded - recorded} events (woke: {woke})"
            )
        after = Job.objects.filter(id=job_id).values_list("status", "available_at").first()
        sleeping = (
            parked is not None and parked.kind == "sleep" and before is not None and before[0] == "pending"
        )
        if woke != sleeping:
            self.model.fail(f"wake of job {job_id} answered {woke}; it was {before}, parked {parked}")
        if not woke and after != before:
            self.model.fail(f"a refused wake moved job {job_id}: {before} → {after}")
        if woke and (after is None or after[0] != "pending" or _due_later(job_id)):
            self.model.fail(f"job {job_id} woken is {after}, not pending and due")

    @rule(
        data=st.data(),
        kind=st.sampled_from(TYPES),
        queue=st.sampled_from(QUEUES),
        outcome=st.sampled_from(["sleep", "wait"]),
    )
    def run_durably(self, data: st.DataObject, kind: str, queue: str, outcome: str) -> None:
        """A job enqueued and claimed (the claim may take another one) whose handler sleeps or
        waits for a signal: durable jobs among the others, in numbers."""
        self.enqueue(kind, queue, None, deadline=False)
        self.claim(QUEUES)
        if self.inflight:
            self.execute(data, outcome, "not_done")

    @precondition(lambda self: bool(self.inflight))
    @rule(data=st.data())
    def lose_lease(self, data: st.DataObject) -> None:
        """The claiming worker freezes: its lease runs out (moved into the past: test data),
        and the reaper takes the job back. The frozen execution may still run later."""
        COUNTS["steps"] += 1
        flight = self.inflight[data.draw(st.integers(0, len(self.inflight) - 1), label="flight")]
        Job.objects.filter(id=flight.job_id, execution_id=flight.held.claim.execution_id).update(
            lease_expires_at=Now() - dt.timedelta(seconds=1), heartbeat_at=Now() - dt.timedelta(minutes=5)
        )
        rescuer.recover()

    # ---- an operator, job by job --------------------------------------------------------------

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        COUNTS["steps"] += 1
        self._retry_one(self._pick(data, self.model.jobs, "job"))

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        COUNTS["steps"] += 1
        self._cancel_one(self._pick(data, self.model.jobs, "job"))

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data(), to=st.sampled_from(["completed", "failed"]))
    def resolve(self, data: st.DataObject, to: str) -> None:
        COUNTS["steps"] += 1
        job_id = self._pick(data, self.model.jobs, "job")
        status = Job.objects.get(id=job_id).status
        try:
            actions.resolve(job_id, to=to, reason=REASON, actor=ACTOR)
        except ActionRefused:
            if status == "needs_review":
                self.model.fail(f"resolve of job {job_id} (needs_review) refused")
            return
        if status != "needs_review":
            self.model.fail(f"job {job_id} resolved from {status}")

    @precondition(lambda self: len(self.model.jobs) >= 2)
    @rule(data=st.data(), action=st.sampled_from(["retry", "retry", "cancel"]))
    def multi_select(self, data: st.DataObject, action: str) -> None:
        """Several jobs ticked in the console, acted on one by one in any order; the same set
        in another order must end the same (retry: statuses and stopped marks; cancel:
        statuses)."""
        COUNTS["steps"] += 1
        ids = data.draw(
            st.lists(st.sampled_from(sorted(self.model.jobs)), min_size=2, max_size=5, unique=True),
            label="ids",
        )
        if action == "retry":
            # Two ticked jobs of one type and unique key: whichever is retried first takes the
            # key and the other is refused, by the documented key rule; the console acts in id
            # order, as a bulk operation does. Keep one of each.
            keyed = {(j.type, j.key): j.id for j in map(self.model.jobs.get, reversed(ids)) if j and j.key}
            ids = [i for i in ids if self.model.jobs[i].key is None or i in keyed.values()]
            if len(ids) < 2:
                return
        orders = [data.draw(st.permutations(ids), label="order") for _ in range(2)]
        act = self._retry_one if action == "retry" else self._cancel_one

        def way(order: list[int]) -> Any:
            return lambda: [act(job_id) for job_id in order]

        # Cancels compare statuses only: a cancel of a step and of the job it waits for may
        # leave it stopped by its workflow or cancelled by the operator, cancelled either way.
        # A step a restore release marked RESTORED that a cancel makes due is parked for review
        # at once, and a parked job is not cancelled (it may have done its effect): documented
        # in docs/workflows.md, and neither end runs it.
        restored = (
            set(Job.objects.filter(id__in=ids, last_error_code="RESTORED").values_list("id", flat=True))
            if action == "cancel"
            else set()
        )
        self._compare(
            f"{action} of {ids}",
            [(f"order {o}", way(o)) for o in orders],
            stopped=action == "retry",
            parked_or_cancelled=restored,
        )

    # ---- bulk operations ----------------------------------------------------------------------

    def _filter(self, data: st.DataObject, action: str) -> JobFilter:
        by = data.draw(st.sampled_from(["workflow", "queue", "status"]), label="filter")
        if by == "workflow" and self.model.workflows:
            return JobFilter(workflow=self._pick(data, self.model.workflows, "workflow"))
        queue = data.draw(st.sampled_from(QUEUES), label="queue")
        if by == "status":
            statuses = (
                ["failed", "cancelled", "needs_review"]
                if action == "retry"
                else ["waiting", "pending", "running"]
            )
            return JobFilter(queue=queue, status=data.draw(st.sampled_from(statuses), label="status"))
        return JobFilter(queue=queue)

    def _start(self, action: str, job_filter: JobFilter, pace: int) -> int | None:
        start = django_jobs.retry_matching if action == "retry" else django_jobs.cancel_matching
        try:
            operation = start(job_filter, reason=REASON, actor=ACTOR, pace=pace)
        except django_jobs.InvalidFilter:
            return None
        return operation.id

    def _run_to_end(self, operation_id: int) -> None:
        while True:
            state = bulk_runner._one_batch(operation_id)
            if state.acted == 0:
                return

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data(), action=st.sampled_from(["retry", "retry", "cancel"]), pace=st.integers(1, 4))
    def bulk_start(self, data: st.DataObject, action: str, pace: int) -> None:
        """A bulk operation by filter, started; its batches (``pace`` jobs each) run as later steps."""
        COUNTS["steps"] += 1
        operation = self._start(action, self._filter(data, action), pace)
        if operation is not None:
            self.operations.append(operation)

    @precondition(lambda self: bool(self.operations))
    @rule(data=st.data())
    def bulk_batch(self, data: st.DataObject) -> None:
        COUNTS["steps"] += 1
        operation = self._pick(data, self.operations, "operation")
        if bulk_runner._one_batch(operation).acted == 0:
            self.operations.remove(operation)

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data(), paces=st.tuples(st.integers(1, 3), st.integers(2, 6)))
    def bulk_retry_in_any_batches(self, data: st.DataObject, paces: tuple[int, int]) -> None:
        """The same retry by filter, run to its end in batches of two sizes: the same outcome."""
        COUNTS["steps"] += 1
        job_filter = self._filter(data, "retry")

        def way(pace: int) -> Any:
            def run() -> None:
                operation = self._start("retry", job_filter, pace)
                if operation is not None:
                    self._run_to_end(operation)

            return run

        self._compare(f"bulk retry of {job_filter.describe()}", [(f"batches of {p}", way(p)) for p in paces])

    # ---- workflows ----------------------------------------------------------------------------

    @precondition(lambda self: bool(self.model.workflows))
    @rule(data=st.data())
    def cancel_workflow(self, data: st.DataObject) -> None:
        COUNTS["steps"] += 1
        workflow = self._pick(data, self.model.workflows, "workflow")
        django_jobs.cancel_workflow(workflow, reason=REASON, actor=ACTOR)
        for job_id, status, requested in Job.objects.filter(workflow_id=workflow).values_list(
            "id", "status", "cancel_requested_at"
        ):
            if status in ("waiting", "pending") or (status == "running" and requested is None):
                self.model.fail(
                    f"cancel of workflow {workflow} left job {job_id} {status}", "cancel-workflow"
                )

    # ---- retention ----------------------------------------------------------------------------

    @precondition(lambda self: bool(self.model.jobs))
    @rule(data=st.data())
    def retention(self, data: st.DataObject) -> None:
        """Age some ended jobs (test data: their finished_at in the past), prune, and compare
        with what the model keeps: a job past its status's retention goes, a workflow goes
        whole once every job of it is ended and past its retention, or stays whole."""
        COUNTS["steps"] += 1
        statuses = _statuses()
        ended = sorted(i for i in self.model.jobs if statuses.get(i) in ENDED_STATUSES)
        if ended:
            chosen = data.draw(st.lists(st.sampled_from(ended), unique=True, max_size=8), label="aged")
            for job_id in chosen:
                age = data.draw(st.sampled_from(AGES), label="age")
                Job.objects.filter(id=job_id).update(finished_at=Now() - dt.timedelta(seconds=age))
        past = self._past_retention()
        expected: set[int] = set()
        for job in self.model.jobs.values():
            if job.workflow is None and job.id in past:
                expected.add(job.id)
        for ids in self.model.workflows.values():
            if all(i in past for i in ids):
                expected.update(ids)
        pruner.run_once(budget=30)
        gone = set(self.model.jobs) - set(_statuses(self.model.jobs))
        if gone != expected:
            self.model.fail(
                f"retention pruned {sorted(gone)}, expected {sorted(expected)} (past: {sorted(past)})",
                "retention",
            )
        for job_id in gone:
            del self.model.jobs[job_id]
            self.model.op_cancelled.discard(job_id)
        for workflow, ids in list(self.model.workflows.items()):
            kept = [i for i in ids if i in self.model.jobs]
            if kept and len(kept) != len(ids):
                self.model.fail(
                    f"workflow {workflow} pruned in part: {sorted(set(ids) - set(kept))} of {ids}",
                    "retention",
                )
            if not kept:
                del self.model.workflows[workflow]

    def _past_retention(self) -> set[int]:
        """The model's jobs ended and past their status's retention, by the database's clock."""
        past: set[int] = set()
        for status, keep in RETENTION.items():
            if keep is None:
                continue
            rows = Job.objects.filter(
                id__in=list(self.model.jobs),
                status=status,
                finished_at__lt=Now() - dt.timedelta(seconds=keep),
            )
            past.update(rows.values_list("id", flat=True))
        return past

    # ---- restore holds ------------------------------------------------------------------------

    @precondition(lambda self: self.model.hold is None)
    @rule()
    def declare_hold(self) -> None:
        COUNTS["steps"] += 1
        hold = restore_holds.declare(actor=ACTOR, reason=REASON)
        self.model.hold = (hold, frozenset(self.model.jobs))

    @precondition(lambda self: self.model.hold is not None)
    @rule(data=st.data())
    def release_hold(self, data: st.DataObject) -> None:
        """Release with answers for some held pending jobs; every not-ended job of an external
        type the hold kept is settled by the release (an event naming the hold)."""
        COUNTS["steps"] += 1
        assert self.model.hold is not None
        hold, before = self.model.hold
        statuses = _statuses()
        held = sorted(
            i for i in before if i in self.model.jobs and self.model.jobs[i].type in EXTERNAL
            and statuses.get(i) in ("waiting", "pending", "running")
        )  # fmt: skip
        pending = [i for i in held if statuses[i] == "pending"]
        answered = (
            data.draw(st.lists(st.sampled_from(pending), unique=True), label="answered") if pending else []
        )
        split = data.draw(st.integers(0, len(answered)), label="done")
        restore_holds.release(
            actor=ACTOR, reason=REASON, hold_id=hold, done=answered[:split], not_done=answered[split:]
        )
        self.model.hold = None
        settled = set(JobEvent.objects.filter(details__restore_hold=hold).values_list("job_id", flat=True))
        for job_id in held:
            if job_id not in settled:
                self.model.fail(
                    f"restore hold {hold} released without settling job {job_id} "
                    f"({self.model.jobs[job_id].type}, {statuses[job_id]})",
                    "restore-hold",
                )

    # ---- queues -------------------------------------------------------------------------------

    @rule(queue=st.sampled_from(QUEUES))
    def pause_or_resume(self, queue: str) -> None:
        COUNTS["steps"] += 1
        if queue in self.model.paused:
            django_jobs.resume_queue(queue, actor=ACTOR, reason=REASON)
            self.model.paused.discard(queue)
        else:
            django_jobs.pause_queue(queue, actor=ACTOR, reason=REASON)
            self.model.paused.add(queue)

    # ---- after every step ---------------------------------------------------------------------

    @invariant()
    def database_agrees(self) -> None:
        model = self.model
        events = list(
            JobEvent.objects.filter(id__gt=model.last_event)
            .order_by("id")
            .values_list("id", "job_id", "kind", "from_status", "to_status", "actor")
        )
        model.read_events(events)
        statuses = _statuses(model.jobs)
        stopped = dict(WorkflowStep.objects.filter(stopped=True).values_list("job_id", "stopped"))
        model.check_statuses(statuses, stopped)
        changed = {e[1] for e in events}
        for job_id, status in statuses.items():
            if status != "waiting" and job_id not in changed:
                continue
            try:
                found = explain(job_id)
            except Exception as exc:
                # Say what the database holds now, on which connection state: a row read a
                # moment ago that explain cannot find must be told from a rolled-back one.
                still = Job.objects.filter(id=job_id).values_list("status", flat=True).first()
                model.fail(
                    f"explainjob {job_id} ({status}) raised {exc!r}; the row now: {still}, "
                    f"in an atomic block: {connection.in_atomic_block}"
                )
                continue
            if not found.sentence or not found.reason:
                model.fail(f"explainjob {job_id} ({status}) names no reason")
            if status == "waiting":
                evidence = dict(found.evidence)
                named = evidence.get("not ended", "") or evidence.get("to retry", "").replace("none", "")
                if found.reason != Reason.WAITING or not named:
                    model.fail(
                        f"explainjob {job_id} waits without naming a job it waits for: {found.sentence}"
                    )
        if model.violations:
            raise AssertionError("\n".join(dict.fromkeys(model.violations)))

    def teardown(self) -> None:
        COUNTS.update({f"tolerated {rule}": n for rule, n in self.model.counted.items()})
        self.inflight.clear()
        connection.close()


def _settings(examples: int, derandomize: bool = False) -> settings:
    """The normal run draws the same examples every time (``derandomize``): a test run stays
    repeatable; a soak draws new ones."""
    return settings(
        max_examples=examples,
        stateful_step_count=int(os.environ.get("DJANGO_JOBS_MODEL_STEPS", "50")),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=derandomize,
        print_blob=True,
    )


@pytest.mark.django_db(transaction=True)
def test_the_state_machine_keeps_every_documented_rule() -> None:
    soak = float(os.environ.get("DJANGO_JOBS_SOAK", "0") or 0)
    started = time.monotonic()
    COUNTS.clear()
    try:
        if not soak:
            run_state_machine_as_test(
                JobsMachine,
                settings=_settings(int(os.environ.get("DJANGO_JOBS_MODEL_EXAMPLES", "60")), derandomize=True),
            )
            return
        for _ in itertools.count():
            if time.monotonic() - started >= soak:
                break
            run_state_machine_as_test(JobsMachine, settings=_settings(20))
    finally:
        line = (
            f"state machine model: {COUNTS['examples']} examples, {COUNTS['steps']} steps "
            f"in {time.monotonic() - started:.0f}s"
            + "".join(
                f"; {k}: {v}"
                for k, v in sorted(COUNTS.items())
                if k.startswith(("tolerated", "late", "dead"))
            )
            + "\n"
        )
        sys.stdout.write(line)
        log = os.environ.get("DJANGO_JOBS_MODEL_LOG")
        if log:
            with open(log, "a") as out:
                out.write(line)
