"""The console's audit: the change and its event commit together; Django's admin log follows.

Every console action (retry, cancel, resolve, pause, resume, a schedule's change) runs in one
transaction of the jobs database, which holds the change and its event (``JobEvent``,
``QueueEvent``, ``ScheduleEvent``). **The event is the record of truth**; the admin's
``LogEntry`` follows it:

- ``LogEntry`` on the jobs database (the usual case): it joins the action's transaction, so a
  crash leaves all or none.
- ``LogEntry`` on another database (``DJANGO_JOBS["DATABASE"]`` is not where
  ``django.contrib.admin`` writes): the two cannot commit together. The action writes a
  ``PendingLogEntry`` in its own transaction instead; once that has committed, the ``LogEntry``
  is written and the pending row deleted. One left behind (the log's database refused the
  write, the process died in between) is delivered by the reaper's next pass
  (:func:`deliver_pending`). An entry may come late, never for an action that rolled back, and
  never twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from django.apps import apps
from django.db import DatabaseError, router, transaction
from django.db.models import Model

from django_jobs.conf import READING_FROM, jobs_settings
from django_jobs.models import PendingLogEntry

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

logger = logging.getLogger("django_jobs.console")

#: Pending entries delivered per transaction of the reaper.
BATCH = 100


def log_alias() -> str:
    """The database Django's admin log is written to."""
    from django.contrib.admin.models import LogEntry

    return router.db_for_write(LogEntry) or "default"


class Audit:
    """Hands out the log entries of one audited change (see :func:`audited_change`)."""

    def __init__(self, user: AbstractBaseUser | AnonymousUser | None, together: bool) -> None:
        # Only a signed-in user can own an admin log entry.
        self._user = user if user is not None and user.is_authenticated else None
        self._together = together
        self.owed: list[int] = []

    def log(self, obj: Model, message: str, *, title: str) -> None:
        """Log ``message`` as a change of ``obj`` by the acting user, as
        ``ModelAdmin.log_change`` does. Only a Django user can own an admin log entry, and only
        where the admin is installed; any other actor is recorded by the event alone.

        ``title`` is what the admin's *Recent actions* shows of the entry (its ``object_repr``):
        the action first, then what it acted on ("Retried emails.send #12 (was failed)"). The
        object's own ``str()`` would name its state before the action, which reads backwards.
        """
        if self._user is None or not apps.is_installed("django.contrib.admin"):
            return
        from django.contrib.admin.models import CHANGE, LogEntry
        from django.contrib.contenttypes.models import ContentType

        entry = {
            "content_type_id": ContentType.objects.get_for_model(obj, for_concrete_model=False).pk,
            "object_id": str(obj.pk),
            "object_repr": title[:200],
            "action_flag": CHANGE,
            "change_message": message,
        }
        if self._together:
            LogEntry.objects.create(user_id=self._user.pk, **entry)
            return
        pending = PendingLogEntry.objects.using(jobs_settings.DATABASE).create(
            user_id=str(self._user.pk), **entry
        )
        self.owed.append(pending.id)


@contextmanager
def audited_change(user: AbstractBaseUser | AnonymousUser | None) -> Iterator[Audit]:
    """One transaction of the jobs database for an operator's action, its event and its log
    entry (``user`` owns the entry; ``None`` for an actor that is not a Django user).

    Log with the :class:`Audit` it yields, inside the block. An exception rolls everything
    back. When the admin's log is on another database, its entries are written after the
    commit; a failure then is logged, and the reaper writes them later.
    """
    if READING_FROM.get() is not None:
        # Actions write the primary; one begun while a page reads from CONSOLE_DATABASE would
        # name the replica, and a standby refuses writes halfway through.
        raise RuntimeError("an action began while a page of the console read from its replica")
    together = not apps.is_installed("django.contrib.admin") or log_alias() == jobs_settings.DATABASE
    audit = Audit(user, together=together)
    with transaction.atomic(using=jobs_settings.DATABASE):
        yield audit
    if audit.owed:
        try:
            deliver_pending(ids=audit.owed)
        except DatabaseError as exc:
            logger.warning(
                "admin log entry not written yet pending_ids=%s error=%s: the action and its event "
                "are recorded; the reaper writes the entry on its next pass",
                audit.owed, type(exc).__name__,
            )  # fmt: skip


def deliver_pending(ids: list[int] | None = None, limit: int = 10 * BATCH) -> int:
    """Write the admin log entries owed (those of ``ids``, or any, at most ``limit``); return
    how many pending rows were settled. Safe to run from many processes at once."""
    if not apps.is_installed("django.contrib.admin"):
        return 0
    settled = 0
    while settled < limit:
        done = _deliver_batch(ids, min(BATCH, limit - settled))
        settled += done
        if done < BATCH or ids is not None:
            break
    if settled and ids is None:
        logger.info("wrote %s admin log entr(ies) owed by console actions", settled)
    return settled


def _deliver_batch(ids: list[int] | None, size: int) -> int:
    """Deliver one batch. The pending rows stay locked while their entries are written, and are
    deleted in the same transaction: a failure anywhere leaves them for the next try, and an
    entry that exists already (written before a crash) is not written again."""
    from django.contrib.admin.models import LogEntry

    alias, into = jobs_settings.DATABASE, log_alias()
    with transaction.atomic(using=alias):
        owed = PendingLogEntry.objects.using(alias).select_for_update(skip_locked=True).order_by("id")
        rows = list((owed.filter(id__in=ids) if ids is not None else owed)[:size])
        if not rows:
            return 0
        user_pk = LogEntry._meta.get_field("user").target_field
        with transaction.atomic(using=into):
            for row in rows:
                fields = {
                    "action_time": row.action_time, "user_id": user_pk.to_python(row.user_id),
                    "content_type_id": row.content_type_id, "object_id": row.object_id,
                    "action_flag": row.action_flag, "change_message": row.change_message,
                }  # fmt: skip
                if not LogEntry.objects.using(into).filter(**fields).exists():
                    LogEntry.objects.using(into).create(object_repr=row.object_repr, **fields)
        PendingLogEntry.objects.using(alias).filter(id__in=[row.id for row in rows]).delete()
    return len(rows)
