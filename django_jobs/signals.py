"""Signals of a job's life, the integration point for error trackers, tracing and metrics.

Each one is sent once the state it describes has committed, with ``sender=Job`` and keyword
arguments only (receivers take ``**kwargs``, as Django asks, so that new arguments can come):

``job_enqueued(job)``
    A job row was created by ``enqueue()`` / ``enqueue_many()`` (or a task of Django's Tasks
    framework), once the transaction that created it committed: never for a job that rolled
    back with its transaction, nor for a call deduplicated onto an existing job by its
    ``unique_key``.
``job_started(job_id, type, queue, attempt, execution_id, worker_id, created_at, available_at)``
    An execution is about to run its handler; its claim committed. Sent by the worker process,
    on the thread that runs the handler (with ``--pool process``, on the thread that hands the
    job to its child process). ``created_at`` is when the job was enqueued, ``available_at``
    when it was due (its ``run_at``, or its retry's time), both by the database's clock, read
    from the job's row when a receiver is connected (None if that read failed): the pickup
    latency of each execution is measured from them.
``job_finished(job_id, type, queue, status, attempt, execution_id, worker_id, duration, error_code, error)``
    The outcome of an execution was recorded: ``status`` is the job's new status (``pending``
    for a retry), ``attempt`` the number of the execution that ended, ``duration`` the seconds
    its handler ran (None when unknown), ``error_code`` and ``error`` (sanitized, as stored)
    None on success. Sent by the worker once its outcome write returned, and by the reaper for
    an execution it took back from a lost worker (``error_code`` says how it was lost,
    ``LEASE_LOST`` most often; ``duration`` None). An execution whose job was taken over sends
    no ``job_finished`` of its own: the reaper's is its end.

Inside a transaction (a ``TestCase``, ``django_jobs.testing.run_one()`` within
``transaction.atomic()``), the signal waits for the commit like any ``transaction.on_commit``
callback: ``TestCase.captureOnCommitCallbacks(execute=True)`` runs them in a test.

For one execution, ``job_started`` comes before its ``job_finished``; the signals of different
executions (several threads, several workers) may interleave: key a receiver's state by
``execution_id``. A receiver that raises is logged (sanitized, on the ``django_jobs.signals``
logger) and ignored: it never changes what was recorded, never stops the worker, and the other
receivers still run. Receivers run on the worker's own threads: keep them quick, hand slow work
to a queue of their own. When no receiver is connected, sending costs one check per job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.dispatch import Signal

from django_jobs import logs
from django_jobs.sanitize import describe, storable_text

logger = logging.getLogger("django_jobs.signals")

job_enqueued = Signal()
job_started = Signal()
job_finished = Signal()


def listened(signal: Signal) -> bool:
    """Whether ``signal`` has a receiver for jobs: a plain attribute read when it has none at
    all (the hot path of a worker asks for every job)."""
    if not signal.receivers:
        return False
    # Imported here: a project's apps.py may import this module before the models can load.
    from django_jobs.models import Job

    return signal.has_listeners(Job)


def send(signal: Signal, sender: type, *, about: str | None = None, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; one that raises is logged, never propagated.

    ``Signal.send_robust`` would log a receiver's traceback as it is, secrets and all: the loop
    is ours so that what reaches the log is sanitized like a stored error. ``about`` says in the
    log what the signal was about (default: the job's id).
    """
    sync_receivers, async_receivers = signal._live_receivers(sender)
    receivers = [*sync_receivers, *(async_to_sync(r) for r in async_receivers)]
    for receiver in receivers:
        try:
            receiver(signal=signal, sender=sender, **kwargs)
        except BaseException as exc:  # SystemExit or KeyboardInterrupt in a receiver stops nothing either
            if about is None:
                about = f"id={kwargs.get('job_id', getattr(kwargs.get('job'), 'id', None))}"
            logger.error(
                "a %s receiver raised %s receiver=%s: %s; nothing was changed",
                _NAMES.get(id(signal), "signal"), about,
                getattr(receiver, "__qualname__", receiver), storable_text(describe(exc), 2000),
                extra=_job_fields(kwargs),
            )  # fmt: skip


def _job_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The log fields of the job a signal is about: its arguments name the execution, or carry
    the job itself (``job_enqueued``: no execution yet); none for a task's signals."""
    if "job_id" in kwargs:
        return logs.job_fields(
            kwargs["job_id"], kwargs.get("type", ""), kwargs.get("queue"), kwargs.get("attempt"),
            kwargs.get("execution_id"), kwargs.get("worker_id"),
        )  # fmt: skip
    job = kwargs.get("job")
    if job is not None and hasattr(job, "pk"):
        return logs.job_fields(job.pk, job.type, job.queue, None, job.execution_id)
    return {}


def after_commit(using: str, action: Callable[[], None]) -> None:
    """Run ``action`` once the current transaction on ``using`` commits (at once without one)."""
    if connections[using].in_atomic_block:
        transaction.on_commit(action, using=using)
    else:
        action()


_NAMES = {id(job_enqueued): "job_enqueued", id(job_started): "job_started", id(job_finished): "job_finished"}
