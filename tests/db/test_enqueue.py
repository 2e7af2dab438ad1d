from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import override_settings
from django.utils import timezone

from django_jobs import (
    EnqueueError,
    InvalidOption,
    InvalidPayload,
    PayloadTooLarge,
    UnknownJobType,
    enqueue,
    enqueue_many,
)
from django_jobs.models import Job
from django_jobs.states import JobStatus
from testproject.testjobs.jobs import noop
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_enqueue_creates_a_pending_job_with_the_types_policy(db_now: Callable[[], Any]) -> None:
    before = db_now()
    job = enqueue("test.noop", {"file_id": 7})
    job.refresh_from_db()
    assert (job.type, job.status, job.payload, job.queue) == (
        "test.noop",
        JobStatus.PENDING,
        {"file_id": 7},
        "default",
    )
    assert (job.attempts, job.max_attempts, job.priority, job.version) == (0, 5, 0, 1)
    assert job.available_at >= before and job.created_at >= before  # database time


def test_enqueue_accepts_the_handler_itself() -> None:
    assert enqueue(noop, {}).type == "test.noop"


def test_options_override_the_policy(db_now: Callable[[], Any]) -> None:
    job = enqueue("test.noop", {}, queue="urgent", priority=50, max_attempts=2, delay=3600)
    job.refresh_from_db()
    assert (job.queue, job.priority, job.max_attempts) == ("urgent", 50, 2)
    assert dt.timedelta(minutes=59) < job.available_at - db_now() <= dt.timedelta(hours=1)


def test_run_at_sets_the_first_run() -> None:
    when = timezone.now() + dt.timedelta(days=1)
    job = enqueue("test.noop", {}, run_at=when)
    job.refresh_from_db()
    assert job.available_at == when


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_leaves_no_job() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("test.noop", {"n": 1})
        enqueue_many("test.noop", [{"n": 2}, {"n": 3}])
        raise RuntimeError("the view failed after enqueueing")
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_enqueue_in_a_transaction_is_one_statement() -> None:
    """In a view's transaction.atomic(), enqueue() adds one round trip: its INSERT."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        enqueue("test.noop", {"n": 1})
    assert len(queries) == 1 and "INSERT INTO django_jobs_job" in queries[0]["sql"]
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_committed_transaction_keeps_its_jobs() -> None:
    with transaction.atomic():
        enqueue("test.noop", {"n": 1})
    assert Job.objects.count() == 1


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: enqueue("no.such.type", {}), UnknownJobType, "unknown job type 'no.such.type'"),
        (lambda: enqueue(print, {}), UnknownJobType, "not a job type"),
        (lambda: enqueue("test.noop", [1, 2]), InvalidPayload, "must be a dict"),
        (lambda: enqueue("test.noop", {"when": dt.date(2024, 1, 1)}), InvalidPayload, "date"),
        (lambda: enqueue("test.noop", {"ids": {1, 2}}), InvalidPayload, "is a set,"),
        (lambda: enqueue("test.noop", {"x": object()}), InvalidPayload, r"\['x'\] is an object,"),
        (lambda: enqueue("test.noop", {"x": int}), InvalidPayload, r"\['x'\] is a type,"),
        (lambda: enqueue("test.noop", {"x": uuid.uuid4()}), InvalidPayload, r"\['x'\] is a UUID,"),
        (lambda: enqueue("test.noop", {"pair": (1, 2)}), InvalidPayload, "tuple"),
        (lambda: enqueue("test.noop", {1: "int key"}), InvalidPayload, "non-string key"),
        (lambda: enqueue("test.noop", {"x": float("nan")}), InvalidPayload, "nan"),
        (lambda: enqueue("test.noop", {"x": "nul\x00byte"}), InvalidPayload, "NUL"),
        (lambda: enqueue("test.noop", {"nul\x00key": 1}), InvalidPayload, "key contains a NUL"),
        (lambda: enqueue("test.noop", {"x": ["\ud800"]}), InvalidPayload, r"\[0\] contains a lone surrogate"),
        (lambda: enqueue("test.noop", {"x": _nested(100_000)}), InvalidPayload, "nested too deeply"),
        (lambda: enqueue("test.noop", {"blob": "x" * 300_000}), PayloadTooLarge, "over the limit"),
        (lambda: enqueue("test.noop", {}, priority=101), InvalidOption, "priority"),
        (lambda: enqueue("test.noop", {}, priority="high"), InvalidOption, "priority"),
        (lambda: enqueue("test.noop", {}, priority=True), InvalidOption, "priority"),
        (lambda: enqueue("test.noop", {}, max_attempts=0), InvalidOption, "max_attempts"),
        (lambda: enqueue("test.noop", {}, queue="has space"), InvalidOption, "queue"),
        (lambda: enqueue("test.noop", {}, queue=""), InvalidOption, "queue"),
        (lambda: enqueue("test.noop", {}, run_at="tomorrow"), InvalidOption, "datetime"),
        (lambda: enqueue("test.noop", {}, run_at=dt.datetime(2030, 1, 1)), InvalidOption, "timezone-aware"),
        (lambda: enqueue("test.noop", {}, delay=-1), InvalidOption, "delay"),
        (lambda: enqueue("test.noop", {}, delay=float("inf")), InvalidOption, "delay"),
        (lambda: enqueue("test.noop", {}, delay="soon"), InvalidOption, "delay"),
        (lambda: enqueue("test.noop", {}, delay=1, run_at=timezone.now()), InvalidOption, "not both"),
        (lambda: enqueue("test.noop", {}, unique_key=""), InvalidOption, "unique_key"),
        (lambda: enqueue("test.noop", {}, unique_key="k" * 201), InvalidOption, "unique_key"),
        (lambda: enqueue_many("test.noop", [{}, {}, {"bad": object()}]), InvalidPayload, "payload #2"),
    ],
)
def test_bad_input_raises_a_clear_error_and_writes_nothing(
    call: Callable[[], object], error: type[EnqueueError], message: str
) -> None:
    JobFactory()
    with pytest.raises(error, match=message) as info:
        call()
    assert isinstance(info.value, EnqueueError) and isinstance(info.value, ValueError)
    assert Job.objects.count() == 1


def test_payload_size_limit_is_a_setting() -> None:
    with override_settings(DJANGO_JOBS={"MAX_PAYLOAD_BYTES": 100}):
        enqueue("test.noop", {"x": "a" * 80})
        with pytest.raises(PayloadTooLarge):
            enqueue("test.noop", {"x": "a" * 100})
    # Multi-byte characters count as bytes, not characters.
    with override_settings(DJANGO_JOBS={"MAX_PAYLOAD_BYTES": 100}), pytest.raises(PayloadTooLarge):
        enqueue("test.noop", {"x": "ж" * 50})


def test_payload_round_trips_exactly() -> None:
    payload = {"s": "ünïcødé ✓", "n": 1, "f": 1.5, "b": True, "none": None, "l": [1, {"a": []}], "big": 2**60}
    job = enqueue("test.noop", payload)
    job.refresh_from_db()
    assert job.payload == payload


def test_unique_key_deduplicates_while_a_job_is_active() -> None:
    first = enqueue("test.noop", {"n": 1}, unique_key="report:2024-01")
    again = enqueue("test.noop", {"n": 2}, unique_key="report:2024-01")
    assert again.id == first.id and again.payload == {"n": 1}
    other_type = enqueue("test.flaky", {"succeed_on": 1}, unique_key="report:2024-01")
    assert other_type.id != first.id
    Job.objects.filter(id=first.id).update(status=JobStatus.COMPLETED)
    after = enqueue("test.noop", {"n": 3}, unique_key="report:2024-01")
    assert after.id != first.id  # the key is free once its holder finished
    assert Job.objects.filter(type="test.noop").count() == 2


def test_unique_key_is_enforced_by_the_database() -> None:
    JobFactory(unique_key="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        JobFactory(unique_key="k")


def test_enqueue_many_returns_rows_in_order_and_deduplicates() -> None:
    held = enqueue("test.noop", {"n": -1}, unique_key="k1")
    jobs = enqueue_many(
        "test.noop",
        [{"n": 0}, {"n": 1, "key": "k1"}, {"n": 2, "key": "k2"}, {"n": 3, "key": "k2"}, {"n": 4}],
        unique_key=lambda p: p.get("key"),
    )
    assert [j.payload.get("n") for j in jobs] == [0, -1, 2, 2, 4]
    assert jobs[1].id == held.id and jobs[2].id == jobs[3].id
    assert Job.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_enqueue_many_in_large_batches_is_all_or_nothing() -> None:
    jobs = enqueue_many("test.noop", ({"i": i} for i in range(2500)))
    assert len(jobs) == 2500 and len({j.id for j in jobs}) == 2500
    assert [j.payload["i"] for j in jobs] == list(range(2500))
    with pytest.raises(InvalidPayload):
        enqueue_many("test.noop", [*({"i": i} for i in range(2500)), {"bad": b"bytes"}])
    assert Job.objects.count() == 2500


def test_enqueue_many_of_nothing_is_nothing() -> None:
    assert enqueue_many("test.noop", []) == []


@pytest.mark.parametrize("queue", ["emails\n", "emails\n\n"])
def test_a_queue_name_with_a_trailing_newline_is_refused(queue: str) -> None:
    with pytest.raises(InvalidOption, match="queue"):
        enqueue("test.noop", {}, queue=queue)
    assert not Job.objects.exists()


@pytest.mark.parametrize("listened", [False, True], ids=["fast path", "post_init listened"])
def test_the_returned_jobs_are_the_rows_as_stored(listened: bool) -> None:
    """enqueue_many builds its instances without Model.__init__ unless someone listens to
    its signals; either way they equal what the database holds, field by field."""
    from django.db.models.signals import post_init

    seen: list[Job] = []

    def receiver(sender: type[Job], instance: Job, **kwargs: Any) -> None:
        seen.append(instance)

    if listened:
        post_init.connect(receiver, sender=Job)
    try:
        jobs = enqueue_many(noop, [{"n": n} for n in range(3)], delay=30, unique_key=lambda p: f"k{p['n']}")
        jobs += enqueue_many(noop, [{"n": 9}])
        jobs.append(enqueue(noop, {"n": 10}, unique_key="single", concurrency_key="account-1"))
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert len(seen) == (5 if listened else 0)
    for job in jobs:
        stored = Job.objects.get(pk=job.pk)
        assert not job._state.adding and job._state.db == stored._state.db
        for field in Job._meta.concrete_fields:
            assert getattr(job, field.attname) == getattr(stored, field.attname), field.name
    assert jobs[0].available_at == jobs[2].available_at > jobs[3].available_at


class _Code(str):
    """A str subclass, as a TextChoices member is: stored as its plain value."""


def test_subclasses_of_plain_values_are_accepted_as_their_value() -> None:
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    job = enqueue("test.noop", {"code": _Code("a"), "level": Level.HIGH, "ok": True})
    job.refresh_from_db()
    assert job.payload == {"code": "a", "level": 3, "ok": True}


@pytest.mark.parametrize("use_tz", [True, False], ids=["USE_TZ", "naive"])
def test_the_returned_times_are_as_the_orm_reads_them(use_tz: bool) -> None:
    """enqueue loads its INSERT's timestamps in binary, not through Django's loader: they must
    still be what the ORM reads, aware with USE_TZ and naive local times without it."""
    with override_settings(USE_TZ=use_tz, TIME_ZONE="America/Sao_Paulo"):
        jobs = [enqueue(noop, {}), enqueue(noop, {}, delay=90), *enqueue_many(noop, [{}, {}], delay=5)]
        for job in jobs:
            stored = Job.objects.get(pk=job.pk)
            assert (job.available_at, job.created_at, job.ready) == (
                stored.available_at,
                stored.created_at,
                stored.ready,
            )
            assert timezone.is_aware(job.available_at) is use_tz
            assert timezone.is_aware(job.created_at) is use_tz
    assert [job.ready for job in jobs] == [True, False, False, False]


def test_enqueue_many_stores_payloads_that_array_text_would_escape() -> None:
    """The payloads travel as one binary text[]: quotes, backslashes, braces, commas, the word
    NULL and empty strings reach the table unchanged, in their order."""
    payloads: list[dict[str, Any]] = [
        {"q": 'say "hi"', "b": "back\\slash", "brace": "{a,b}", "s": "NULL"},
        {"": "", "nested": {"x": ['"', "\\", "}", ","]}, "nl": "line\nbreak\ttab"},
        {"u": "ünïcødé ✓ 🚀", "n": -1, "f": 0.1},
        {},
    ]
    jobs = enqueue_many(noop, payloads * 3)
    stored = dict(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "payload"))
    assert [stored[job.pk] for job in jobs] == payloads * 3
    assert [job.payload for job in jobs] == payloads * 3


def test_a_lone_enqueue_keeps_its_cursor_and_a_nested_one_gets_its_own() -> None:
    """enqueue() runs its INSERT on a cursor kept on the connection between calls. An execute
    wrapper that enqueues while that cursor runs (a hostile or clumsy one) gets a cursor of its
    own, and each call returns its own job; after Django reconnects, a new cursor is kept."""
    from django.db import connection

    first = enqueue(noop, {"n": 1})
    kept = connection._django_jobs_kept_cursor  # type: ignore[attr-defined]
    assert enqueue(noop, {"n": 2}).payload == {"n": 2}
    assert connection._django_jobs_kept_cursor is kept and not kept.in_use  # type: ignore[attr-defined]

    nested: list[Job] = []
    entered: list[bool] = []

    def enqueue_within(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if "INSERT INTO django_jobs_job" in sql and not entered:
            entered.append(True)
            nested.append(enqueue(noop, {"n": "nested"}))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(enqueue_within):
        outer = enqueue(noop, {"n": 3})
    assert outer.payload == {"n": 3} and [job.payload for job in nested] == [{"n": "nested"}]
    stored = dict(Job.objects.filter(pk__in=[first.pk, outer.pk, nested[0].pk]).values_list("pk", "payload"))
    assert stored == {first.pk: {"n": 1}, outer.pk: {"n": 3}, nested[0].pk: {"n": "nested"}}
    assert not kept.in_use


@pytest.mark.django_db(transaction=True)
def test_a_kept_cursor_does_not_outlive_its_connection() -> None:
    from django.db import connection

    enqueue(noop, {})
    kept = connection._django_jobs_kept_cursor  # type: ignore[attr-defined]
    connection.close()
    job = enqueue(noop, {"after": "reconnect"})
    assert connection._django_jobs_kept_cursor is not kept  # type: ignore[attr-defined]
    assert Job.objects.get(pk=job.pk).payload == {"after": "reconnect"}
