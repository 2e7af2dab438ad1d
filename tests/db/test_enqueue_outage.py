"""What docs/workers.md tells a long-lived process about ``enqueue()`` meeting an outage: it
raises Django's ``OperationalError``, nothing was written, and outside a request the broken
connection stays broken until it is closed (``close_old_connections()``)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, close_old_connections, connection, transaction

from django_jobs import enqueue
from django_jobs.models import Job
from testproject.shop.models import Order

pytestmark = pytest.mark.django_db(transaction=True)


def _cut_this_connection() -> None:
    """Terminate this thread's backend from outside, as a restart or a failover does."""
    settings = connection.settings_dict
    dsn = f"host={settings['HOST']} port={settings['PORT'] or 5432} user={settings['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])


def test_an_enqueue_that_meets_an_outage_raises_and_writes_nothing_until_the_connection_is_replaced() -> None:
    enqueue("test.noop", {})  # the connection is open
    _cut_this_connection()

    with pytest.raises(OperationalError):
        enqueue("test.noop", {})
    with pytest.raises(OperationalError), transaction.atomic():  # the whole transaction fails
        Order.objects.create(amount_cents=1)
        enqueue("test.noop", {})
    # The database is back, but this connection is not: a request would replace it, a loop must.
    close_old_connections()
    enqueue("test.noop", {})

    assert Job.objects.count() == 2 and not Order.objects.exists()
