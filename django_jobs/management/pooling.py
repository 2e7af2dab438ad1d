"""What ``runjobs`` and ``reapjobs`` do at their start about a connection pooler in transaction
mode in front of the jobs database (:mod:`django_jobs.runtime.pooler` finds it).

They log what ``manage.py check --database`` would say (``django_jobs.W004`` … ``W007``), and
treat such a pooler as declared for their own process, as if the alias set
``DISABLE_SERVER_SIDE_CURSORS``: nothing they run may then outlive a transaction (no prepared
statement, no session setting). A database that does not answer yet is left to the worker's
outage handling: the look is skipped.
"""

from __future__ import annotations

import logging

import psycopg

from django_jobs import checks
from django_jobs.conf import jobs_settings
from django_jobs.runtime import pooler
from django_jobs.transitions.cursor import transaction_pooled

logger = logging.getLogger("django_jobs.worker")


def look_for_poolers() -> None:
    """Say what the checks would, and treat a transaction pooler found as declared."""
    try:
        seen = pooler.survey()
    except psycopg.Error:
        return
    for message in checks.pooling_messages(seen):
        # W006 is the listener's to say, when it gives up; a process that does not listen (a
        # reaper, a worker that drains and exits) has nothing to do with it.
        if message.id != "django_jobs.W006":
            logger.warning("%s %s (%s)", message.msg, message.hint, message.id)
    if seen.pooling is pooler.Pooling.TRANSACTIONS:
        pooler.treat_as_pooled(seen.alias)
    if transaction_pooled(seen.alias) and jobs_settings.STATEMENT_TIMEOUT is not None:
        logger.info(
            "database %r is pooled in transaction mode: the worker's statements run without"
            " STATEMENT_TIMEOUT and with the server's jit setting there (a session setting would"
            " stay on a server connection the pooler lends to others); set them on its role",
            seen.alias,
        )
