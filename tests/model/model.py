"""The reference model: what the model knows of each job it enqueued, and the checks of what
the database says against the docs' rules (docs/lifecycle.md, docs/workflows.md,
docs/operations/). Pure Python over rows read by the machine."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from django_jobs.states import TRANSITIONS
from tests.model.shapes import ENDED_STATUSES, SUCCEEDED, SUCCEEDED_STATUSES, condition_holds

#: Who the model's operator is, on every action and in the events it leaves.
ACTOR = "model-operator"
#: The arrows no event records: the claim, and the outcome write of a plain success.
SILENT = {"pending": {"running"}, "running": {"completed"}}
KEY_HOLDING = frozenset({"waiting", "pending", "running", "needs_review"})
#: The intended rules the model encodes that today's code may not keep yet, by the name a
#: breach of each is reported under.
KNOWN = {
    "retry-step": "an operator's retry of a step that waits: pending if it may run now, else waiting",
    "stopped-mark": "an operator's retry or cancel clears the stopped mark: a step they cancelled stays so",
    "order": "the outcome of a set of retries does not depend on their order or batching",
    "key-held": "a retry that would resume a stopped step whose key is held is refused, naming both",
    "cancel-workflow": "cancel_workflow cancels, or asks to stop, every member not ended",
    "retention": "a workflow is kept or pruned whole",
    "restore-hold": "a restore hold holds, and its release settles, every not-ended external job",
}


def silent_closure(status: str) -> set[str]:
    reached, todo = {status}, [status]
    while todo:
        for nxt in SILENT.get(todo.pop(), ()):
            if nxt not in reached:
                reached.add(nxt)
                todo.append(nxt)
    return reached


@dataclass
class MJob:
    id: int
    type: str
    queue: str
    key: str | None
    workflow: int | None = None
    waits: frozenset[int] = frozenset()
    runs_if: str = SUCCEEDED
    role: str = "step"
    #: The status after the last event the model read of it (or its first status).
    cursor: str = "pending"
    #: How many times it entered ``waiting`` (born waiting, resumed, retried back to waiting).
    entered_waiting: int = 0
    dues: int = 0
    #: Whether an operator retried it (an arrow into pending or waiting not its workflow's).
    retried: bool = False


@dataclass
class Model:
    jobs: dict[int, MJob] = field(default_factory=dict)
    workflows: dict[int, list[int]] = field(default_factory=dict)
    #: Jobs an operator cancelled (or asked to stop) since their last operator retry.
    op_cancelled: set[int] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    #: The open restore hold: its id, and the jobs that existed when it opened.
    hold: tuple[int, frozenset[int]] | None = None
    last_event: int = 0
    violations: list[str] = field(default_factory=list)
    #: The rules (KNOWN's keys) whose breaches are counted, not failed: set from
    #: DJANGO_JOBS_MODEL_TOLERATE to look past the defects being fixed for other ones.
    tolerated: frozenset[str] = frozenset()
    counted: collections.Counter[str] = field(default_factory=collections.Counter)

    def fail(self, message: str, rule: str | None = None) -> None:
        if rule is not None and rule in self.tolerated:
            self.counted[rule] += 1
            return
        self.violations.append(f"[{rule}] {message}" if rule else message)

    # ---- workflows ----------------------------------------------------------------------------

    def runs_when_ended(self, job: MJob, statuses: dict[int, str]) -> str:
        """Where an operator's retry of ``job`` (failed, cancelled or parked) takes it by the
        intended rules: pending when they all ended and its condition holds; else waiting
        (for them to end, or, for a step that runs if they succeeded, for a retry of the one
        that did not); refused for a step that runs after a failure when they all succeeded."""
        if not job.waits:
            return "pending"
        waited = [statuses[w] for w in job.waits]
        if any(s not in ENDED_STATUSES for s in waited):
            return "waiting"
        if condition_holds(job.runs_if, waited):
            return "pending"
        return "waiting" if job.runs_if == SUCCEEDED else "refused"

    def downstream(self, job_id: int) -> list[MJob]:
        return [j for j in self.jobs.values() if job_id in j.waits]

    def key_holder(
        self, job: MJob, statuses: dict[int, str], keys: dict[tuple[str, str], list[int]]
    ) -> int | None:
        """Another job that holds ``job``'s unique key now."""
        if job.key is None:
            return None
        for other in keys.get((job.type, job.key), []):
            if other != job.id and statuses.get(other) in KEY_HOLDING:
                return other
        return None

    # ---- events -------------------------------------------------------------------------------

    def read_events(self, events: list[tuple[int, int, str, str | None, str | None, str | None]]) -> None:
        """Follow the events written since the last step: every arrow documented, each job's
        events joined by silent arrows only, a due at most once per step and never more often
        than the job entered waiting, and the operator's cancels."""
        dues_now: collections.Counter[int] = collections.Counter()
        for event_id, job_id, kind, source, target, actor in events:
            self.last_event = max(self.last_event, event_id)
            job = self.jobs.get(job_id)
            if job is None:
                continue  # a bulk operation's own job
            if source and target and source != target and target not in TRANSITIONS.get(source, ()):
                self.fail(f"job {job_id}: event {kind} took an undocumented arrow {source} → {target}")
            if source is not None and source not in silent_closure(job.cursor):
                self.fail(
                    f"job {job_id}: event {kind} ({source} → {target}) follows {job.cursor} with no "
                    "recorded way between"
                )
            if target is not None:
                job.cursor = target
            if kind == "due":
                dues_now[job_id] += 1
                job.dues += 1
                if job.dues > job.entered_waiting:
                    self.fail(f"job {job_id} made due {job.dues} times, waited {job.entered_waiting} times")
            if target == "waiting" and source != "waiting":
                job.entered_waiting += 1
            if kind == "resumed" and job_id in self.op_cancelled:
                self.fail(
                    f"job {job_id}, cancelled by an operator, was resumed by its workflow", "stopped-mark"
                )
            if actor == ACTOR and kind in ("cancelled", "cancel_requested"):
                self.op_cancelled.add(job_id)
            if kind == "manual_retry":
                self.op_cancelled.discard(job_id)
                job.retried = True
        for job_id, count in dues_now.items():
            if count > 1:
                self.fail(f"job {job_id} made due {count} times in one step")

    def check_statuses(self, statuses: dict[int, str], stopped: dict[int, bool]) -> None:
        """What the statuses of a workflow's jobs must say of each other."""
        for job in self.jobs.values():
            status = statuses.get(job.id)
            if status is None:
                continue
            if status not in silent_closure(job.cursor):
                self.fail(f"job {job.id} is {status}, but its last event left it {job.cursor}")
            if not job.waits:
                continue
            waited = [statuses.get(w) for w in job.waits]
            if any(s is None for s in waited):
                self.fail(f"job {job.id} is kept, but a job it waits for was pruned")
                continue
            all_ended = all(s in ENDED_STATUSES for s in waited)
            # Waiting once they all ended: only a step that runs if they succeeded, retried by an
            # operator after one did not, waiting for that one's retry (explainjob names it).
            awaits_a_retry = job.runs_if == SUCCEEDED and not all(s in SUCCEEDED_STATUSES for s in waited)
            if status == "waiting" and all_ended and not awaits_a_retry:
                self.fail(
                    f"job {job.id} ({job.role}) waits, but every job it waits for ended "
                    f"({sorted(zip(job.waits, waited, strict=True))}): it waits forever"
                )
            early = job.runs_if == SUCCEEDED and not all(s in SUCCEEDED_STATUSES for s in waited)
            if status in ("pending", "running") and early:
                self.fail(
                    f"job {job.id} ({job.role}, runs if they succeeded) is {status} while the jobs "
                    f"it waits for are {sorted(zip(job.waits, waited, strict=True))}",
                    "retry-step",
                )
            ended = [s for s in waited if s]
            if (
                stopped.get(job.id)
                and status == "cancelled"
                and (not all_ended or condition_holds(job.runs_if, ended))
            ):
                self.fail(
                    f"job {job.id} stays stopped by its workflow, but the jobs it waits for are "
                    f"{sorted(zip(job.waits, waited, strict=True))}"
                )
