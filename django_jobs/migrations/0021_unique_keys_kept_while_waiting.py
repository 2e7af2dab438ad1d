"""A workflow's step holds its unique key while it waits: the partial unique index of keys is
rebuilt with ``waiting`` among the statuses that hold one.

Built ``CONCURRENTLY`` (writes go on meanwhile), then the old index is dropped the same way.
An ``enqueue()`` of the previous release still finds its arbiter in the new index (its
``ON CONFLICT`` names a subset of the new index's statuses), so web processes may roll out
after the migration.
"""

from django.db import migrations, models

NEW = (
    "CREATE UNIQUE INDEX CONCURRENTLY django_jobs_unique_key_kept ON django_jobs_job (type, unique_key)"
    " WHERE status IN ('needs_review', 'pending', 'running', 'waiting') AND unique_key IS NOT NULL"
)
OLD = (
    "CREATE UNIQUE INDEX CONCURRENTLY django_jobs_unique_key_held ON django_jobs_job (type, unique_key)"
    " WHERE status IN ('needs_review', 'pending', 'running') AND unique_key IS NOT NULL"
)


class Migration(migrations.Migration):
    atomic = False  # each concurrent build commits by itself

    dependencies = [
        ('django_jobs', '0020_workflows'),
    ]

    operations = [
        # A build that failed half-way leaves an invalid index behind: drop it first.
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_unique_key_kept",
            migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            NEW,
            "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_unique_key_kept",
            state_operations=[
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['needs_review', 'pending', 'running', 'waiting']), ('unique_key__isnull', False)), fields=('type', 'unique_key'), name='django_jobs_unique_key_kept'),
                ),
            ],
        ),
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_unique_key_held",
            OLD,
            state_operations=[migrations.RemoveConstraint(model_name='job', name='django_jobs_unique_key_held')],
        ),
    ]
