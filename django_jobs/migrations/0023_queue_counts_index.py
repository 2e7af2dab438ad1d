"""The dashboard's queue table and the metrics view's gauges count each queue's waiting,
pending, due, failed and parked jobs through an index of those statuses only, by queue.

Before it, the counts read every pending and waiting row of the table (a sequential scan once a
backlog is a few per cent of it: seconds on ten million rows) and every failed row (kept forever
by default). With it, a loose scan finds the queues and each count is a range of the index that
stops at a cap (``django_jobs.reads.queues.COUNT_CAP``): the scrape costs the same on any table.

Its entries are written when a job becomes pending, waiting, failed or parked (an enqueue, a
retry, a failure), not by a claim, a heartbeat or a completion, whose rows leave its predicate.

Built ``CONCURRENTLY``: enqueues, claims and outcomes go on while it is built. A build that failed
half-way leaves an invalid index behind, which the first step drops before building again.
"""

from django.db import migrations, models

INDEX = (
    "CREATE INDEX CONCURRENTLY django_jobs_queue_counts ON django_jobs_job (queue, status, available_at)"
    " WHERE status IN ('failed', 'needs_review', 'pending', 'waiting')"
)
DROP = "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_queue_counts"


class Migration(migrations.Migration):
    atomic = False  # a concurrent build commits by itself

    dependencies = [
        ('django_jobs', '0022_bulk_operations'),
    ]

    operations = [
        migrations.RunSQL(DROP, migrations.RunSQL.noop),
        migrations.RunSQL(
            INDEX,
            DROP,
            state_operations=[
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(condition=models.Q(('status__in', ['failed', 'needs_review', 'pending', 'waiting'])), fields=['queue', 'status', 'available_at'], name='django_jobs_queue_counts'),
                ),
            ],
        ),
    ]
