"""What docs/writing-jobs.md says of a handler's transactions, proven with the real worker.

A handler runs in autocommit (``tests/db/test_lifecycle.py`` checks the connection); inside its
own ``transaction.atomic()``, ``ctx.effect`` joins the transaction and ``ctx.save_checkpoint``
does not; the documented pattern — commit the step with its effect key, then save the
checkpoint — does every step once even when the execution dies between the two.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from django_jobs import Backoff, JobContext, RetryableError, enqueue, job
from django_jobs.models import Job, ProcessedEffect
from django_jobs.registry import registry
from django_jobs.states import JobStatus
from django_jobs.testing import run_until_settled
from testproject.shop.models import Order, Receipt
from testproject.testjobs.models import EffectLog
from tests.docs.snippets import python_blocks

pytestmark = pytest.mark.django_db(transaction=True)
FAST = Backoff(base=0.05, cap=0.1, jitter=0)
#: What each attempt saw when it started, by attempt number.
seen: dict[int, dict[str, Any]] = {}


def rolled_back_block(ctx: JobContext, payload: dict[str, Any]) -> None:
    """Attempt 1 does its effect and saves a checkpoint inside a block that then rolls back."""
    seen[ctx.attempt] = {"checkpoint": ctx.checkpoint, "execution_id": ctx.execution_id}
    with transaction.atomic():
        with ctx.effect("step") as first_time:
            seen[ctx.attempt]["first_time"] = first_time
            if first_time:
                EffectLog.objects.create(key="step", execution_id=ctx.execution_id)
        ctx.save_checkpoint({"step": "done"})
        if ctx.attempt == 1:
            raise RetryableError("the block fails after its effect and its checkpoint")


def steps_then_checkpoints(ctx: JobContext, payload: dict[str, Any]) -> None:
    """The pattern of writing-jobs.md; attempt 1 dies between step 2's commit and its checkpoint."""
    start = (ctx.checkpoint or {}).get("next", 0)
    seen[ctx.attempt] = {"start": start}
    for index in range(start, payload["steps"]):
        with transaction.atomic(), ctx.effect(f"step:{ctx.job_id}:{index}") as first_time:
            if first_time:
                EffectLog.objects.create(key=f"step:{index}", execution_id=ctx.execution_id)
        if ctx.attempt == 1 and index == payload["die_before_checkpoint_of"]:
            raise RetryableError("lost between the step's commit and its checkpoint")
        ctx.save_checkpoint({"next": index + 1})


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    seen.clear()
    job("docs.rolled_back_block", backoff=FAST)(rolled_back_block)
    job("docs.steps_then_checkpoints", backoff=FAST)(steps_then_checkpoints)
    yield
    registry.unregister("docs.rolled_back_block")
    registry.unregister("docs.steps_then_checkpoints")


def test_an_effect_rolls_back_with_the_handlers_block_but_a_checkpoint_does_not() -> None:
    created = enqueue("docs.rolled_back_block", {})
    run_until_settled(timeout=30)

    assert Job.objects.get(id=created.id).status == JobStatus.COMPLETED
    # Attempt 1's block rolled back its effect and the effect's key together: attempt 2 found
    # the key new and did the effect, once...
    assert seen[1]["first_time"] is True and seen[2]["first_time"] is True
    assert list(EffectLog.objects.values_list("execution_id", flat=True)) == [seen[2]["execution_id"]]
    assert ProcessedEffect.objects.filter(key="step").count() == 1
    # ...but its checkpoint, written on the worker's connection, had been committed at once.
    assert seen[2]["checkpoint"] == {"step": "done"}


def test_a_step_committed_with_its_key_then_checkpointed_happens_once() -> None:
    created = enqueue("docs.steps_then_checkpoints", {"steps": 4, "die_before_checkpoint_of": 2})
    run_until_settled(timeout=30)

    assert Job.objects.get(id=created.id).status == JobStatus.COMPLETED
    assert seen[2]["start"] == 2  # the checkpoint lagged one step behind the committed work...
    steps = sorted(EffectLog.objects.values_list("key", flat=True))
    assert steps == ["step:0", "step:1", "step:2", "step:3"]  # ...and the effect key kept it single
    assert len(set(EffectLog.objects.values_list("execution_id", flat=True))) == 2  # both attempts worked


@pytest.mark.usefixtures("example_app_as_in_the_docs")
def test_the_documented_pattern_issues_each_receipt_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The handler of writing-jobs.md as printed, its execution lost once between a step's
    # commit and its checkpoint.
    (block,) = [b for b in python_blocks() if '@job("shop.issue_receipts")' in b.code]
    exec(block.compiled(), {"__name__": "docs_issue_receipts"})
    save_checkpoint = JobContext.save_checkpoint

    def lost_once(ctx: JobContext, data: Any) -> None:
        if ctx.attempt == 1 and data == {"next": 3}:
            raise RetryableError("lost between the step's commit and its checkpoint")
        save_checkpoint(ctx, data)

    monkeypatch.setattr(JobContext, "save_checkpoint", lost_once)
    try:
        orders = [Order.objects.create(amount_cents=100 * n) for n in range(1, 6)]
        created = enqueue("shop.issue_receipts", {"order_ids": [o.id for o in orders]})
        run_until_settled(timeout=30)
    finally:
        registry.unregister("shop.issue_receipts")

    finished = Job.objects.get(id=created.id)
    assert finished.status == JobStatus.COMPLETED and finished.attempts == 2
    assert finished.checkpoint == {"next": 5}
    assert sorted(Receipt.objects.values_list("order_id", flat=True)) == [o.id for o in orders]
