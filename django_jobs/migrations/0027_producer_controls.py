"""What a producer may say at enqueue: a start-by deadline (``start_by``) and a debounce key
(``debounce_key``), each a nullable column (added without rewriting the table), and the
partial index each is found by: the pending jobs with a deadline, by deadline (the reaper's
pass ends those past it), and the pending jobs with a debounce key, by type and key (a
debounced enqueue updates its job). Neither index holds a row of a job that uses neither.

``unique_for`` needs no new column: it reads the jobs of a unique key through
``django_jobs_unique_key``, which every keyed job is in already.

The indexes are built ``CONCURRENTLY``: enqueues, claims and outcomes go on while they are
built. Every step can run again after a failure or a killed ``migrate``: the columns are added
``IF NOT EXISTS``, and a build that failed half-way leaves an invalid index behind, which the
step before it drops.
"""

from django.db import migrations, models

START_BY = (
    "CREATE INDEX CONCURRENTLY django_jobs_start_by ON django_jobs_job (start_by)"
    " WHERE start_by IS NOT NULL AND status = 'pending'"
)
DEBOUNCE = (
    "CREATE INDEX CONCURRENTLY django_jobs_debounce_key ON django_jobs_job (type, debounce_key)"
    " WHERE debounce_key IS NOT NULL AND status = 'pending'"
)
DROP_START_BY = "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_start_by"
DROP_DEBOUNCE = "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_debounce_key"
COLUMNS = (
    "ALTER TABLE django_jobs_job ADD COLUMN IF NOT EXISTS debounce_key varchar(200) NULL,"
    " ADD COLUMN IF NOT EXISTS start_by timestamp with time zone NULL"
)
DROP_COLUMNS = (
    "ALTER TABLE django_jobs_job DROP COLUMN IF EXISTS debounce_key, DROP COLUMN IF EXISTS start_by"
)


class Migration(migrations.Migration):
    atomic = False  # a concurrent build commits by itself

    dependencies = [
        ('django_jobs', '0026_workflow_rules_in_the_arrows'),
    ]

    operations = [
        migrations.RunSQL(
            COLUMNS,
            DROP_COLUMNS,
            state_operations=[
                migrations.AddField(
                    model_name='job',
                    name='debounce_key',
                    field=models.CharField(blank=True, max_length=200, null=True),
                ),
                migrations.AddField(
                    model_name='job',
                    name='start_by',
                    field=models.DateTimeField(blank=True, help_text='Never started after this.', null=True),
                ),
            ],
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='kind',
            field=models.CharField(choices=[('retry_scheduled', 'Retry scheduled'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('released', 'Released by its worker'), ('recovered', 'Recovered by the reaper'), ('needs_review', 'Parked for review'), ('manual_retry', 'Retried by an operator'), ('cancel_requested', 'Cancellation requested'), ('resolved', 'Resolved by an operator'), ('reconciled', 'Reconciled: the effect had already happened'), ('restore_released', 'Released from a restore hold'), ('due', 'Due: the jobs it waited for ended'), ('stopped', 'Stopped by its workflow'), ('resumed', 'Resumed: waits again'), ('expired', 'Expired: not started by its deadline')], max_length=30),
        ),
        migrations.RunSQL(DROP_START_BY, migrations.RunSQL.noop),
        migrations.RunSQL(
            START_BY,
            DROP_START_BY,
            state_operations=[
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(condition=models.Q(('status', 'pending'), ('start_by__isnull', False)), fields=['start_by'], name='django_jobs_start_by'),
                ),
            ],
        ),
        migrations.RunSQL(DROP_DEBOUNCE, migrations.RunSQL.noop),
        migrations.RunSQL(
            DEBOUNCE,
            DROP_DEBOUNCE,
            state_operations=[
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(condition=models.Q(('status', 'pending'), ('debounce_key__isnull', False)), fields=['type', 'debounce_key'], name='django_jobs_debounce_key'),
                ),
            ],
        ),
    ]
