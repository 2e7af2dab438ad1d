"""Durable jobs' face for the app's own code: :func:`signal`, which a webhook view calls to
deliver an event to the job its key addresses (docs/durable-jobs.md), and the signal key a job
is given at enqueue (``enqueue(..., signal_key=...)``).

Both write in the caller's transaction on the jobs database: a signal sent in a transaction that
rolls back was never sent, and a job enqueued in one never had its key.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from django_jobs.conf import jobs_settings
from django_jobs.durable_rules import InvalidSignal, UnknownSignalKey, check_key, signal_json
from django_jobs.transitions import durable as records


def signal(key: str, name: str, data: Any = None) -> bool:
    """Send signal ``name`` with ``data`` (plain JSON) to the job enqueued with ``signal_key=key``.

    ::

        @csrf_exempt
        def stripe_webhook(request):
            event = verify(request)
            with transaction.atomic():
                Payment.objects.filter(intent=event.intent).update(paid=True)
                django_jobs.signal(f"stripe:{event.intent}", "paid", {"amount": event.amount})
            return HttpResponse()

    The signal is stored in the caller's transaction (rolled back, it was never sent) and is
    kept until the job's ``ctx.wait_for(name, ...)`` takes it: sent before the job reaches its
    wait, it is there when it does. A job parked in that wait is made due at once. The first
    signal of a name is the one the job gets: a later one of the same name (a webhook the
    provider delivered twice) is not stored, and ``signal()`` returns False; it returns True
    when this signal was stored. The job's row stays locked (``FOR SHARE``) until the
    transaction ends: send it last, and commit soon.

    Raises ``UnknownSignalKey`` when no job has ``key`` (retention removed it, or it was never
    enqueued), ``InvalidSignal`` for a bad key or name, or for data that is not plain JSON or
    is larger than ``MAX_PAYLOAD_BYTES``. Nothing is written then.
    """
    check_key(key)
    encoded = signal_json(name, data)
    sent = records.send_signal(key, name, encoded)
    if sent is None:
        raise UnknownSignalKey(
            f"no job has signal key {key!r}: give it at enqueue, enqueue(..., signal_key={key!r}); "
            "nothing was written"
        )
    return sent.stored


def give_key(job_id: int, key: str) -> None:
    """Give job ``job_id`` signal key ``key``, in the caller's transaction (enqueue does, for
    ``signal_key=``). Raises ``InvalidSignal`` for a key another job has, or for a job that
    has another key; nothing is written then."""
    alias = jobs_settings.DATABASE
    try:
        with transaction.atomic(using=alias):
            given = records.address(job_id, check_key(key))
    except IntegrityError as exc:
        raise InvalidSignal(f"job {job_id} has another signal key: a job has one") from exc
    if not given:
        raise InvalidSignal(f"signal key {key!r} is another job's already: a key addresses one job")


__all__ = ["InvalidSignal", "UnknownSignalKey", "give_key", "signal"]
