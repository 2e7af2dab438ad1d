"""The claim indexes ordered by priority alone are dropped, ``CONCURRENTLY``: the workers of
this release claim through those of 0013. Reversed, they are rebuilt the same way, for the
workers of the previous release."""

from django.db import migrations


def dropped_concurrently(name, definition):
    return migrations.RunSQL(
        f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
        [f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
         f"CREATE INDEX CONCURRENTLY {name} ON django_jobs_job {definition}"],
        state_operations=[migrations.RemoveIndex(model_name='job', name=name)],
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('django_jobs', '0013_ready_jobs_apart_from_later'),
    ]

    operations = [
        dropped_concurrently(
            'django_jobs_claim_queue',
            "(queue, priority DESC, available_at, id, version) WHERE status = 'pending'",
        ),
        dropped_concurrently(
            'django_jobs_claim_any',
            "(priority DESC, available_at, id, version) WHERE status = 'pending'",
        ),
    ]
