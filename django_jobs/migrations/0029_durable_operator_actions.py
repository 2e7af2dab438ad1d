"""The console's actions on durable jobs, and the counts of sleeping and waiting ones.

- a permission, ``signal_job``: send a signal to a durable job, or wake a sleeping one, from the
  console (audited, as a retry is);
- two event kinds: ``woken`` and ``signal_sent``, each with its operator and reason;
- two partial indexes of ``django_jobs_jobstep``, which the dashboard and the metrics count
  through, each count a range stopped at a cap: the sleeps by wake time (a range from now on),
  and the waits still open by timeout (an ended wait leaves the index).

Built ``CONCURRENTLY``: the steps durable jobs record go on while they are built. A build that
failed half-way leaves an invalid index behind, which the step before each build drops.
"""

from django.db import migrations, models

SLEEP = (
    "CREATE INDEX CONCURRENTLY django_jobs_step_sleep ON django_jobs_jobstep (until)"
    " WHERE kind = 'sleep'"
)
DROP_SLEEP = "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_step_sleep"
OPEN_WAIT = (
    "CREATE INDEX CONCURRENTLY django_jobs_step_open_wait ON django_jobs_jobstep (until)"
    " WHERE ended_at IS NULL AND kind = 'wait'"
)
DROP_OPEN_WAIT = "DROP INDEX CONCURRENTLY IF EXISTS django_jobs_step_open_wait"


class Migration(migrations.Migration):
    atomic = False  # a concurrent build commits by itself

    dependencies = [
        ('django_jobs', '0028_durable_jobs'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='job',
            options={'ordering': ('-id',), 'permissions': (('retry_job', 'Can retry failed, cancelled and parked jobs'), ('cancel_job', 'Can cancel pending and running jobs'), ('resolve_job', 'Can resolve jobs that need review'), ('view_sensitive_payload', 'Can see the sensitive fields of payloads unmasked'), ('signal_job', 'Can send signals to durable jobs and wake sleeping ones'))},
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='kind',
            field=models.CharField(choices=[('retry_scheduled', 'Retry scheduled'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('released', 'Released by its worker'), ('recovered', 'Recovered by the reaper'), ('needs_review', 'Parked for review'), ('manual_retry', 'Retried by an operator'), ('cancel_requested', 'Cancellation requested'), ('resolved', 'Resolved by an operator'), ('reconciled', 'Reconciled: the effect had already happened'), ('restore_released', 'Released from a restore hold'), ('due', 'Due: the jobs it waited for ended'), ('stopped', 'Stopped by its workflow'), ('resumed', 'Resumed: waits again'), ('expired', 'Expired: not started by its deadline'), ('suspended', 'Suspended: sleeps or waits for a signal'), ('woken', 'Woken by an operator'), ('signal_sent', 'Signal sent by an operator')], max_length=30),
        ),
        migrations.RunSQL(DROP_SLEEP, migrations.RunSQL.noop),
        migrations.RunSQL(
            SLEEP,
            DROP_SLEEP,
            state_operations=[
                migrations.AddIndex(
                    model_name='jobstep',
                    index=models.Index(condition=models.Q(('kind', 'sleep')), fields=['until'], name='django_jobs_step_sleep'),
                ),
            ],
        ),
        migrations.RunSQL(DROP_OPEN_WAIT, migrations.RunSQL.noop),
        migrations.RunSQL(
            OPEN_WAIT,
            DROP_OPEN_WAIT,
            state_operations=[
                migrations.AddIndex(
                    model_name='jobstep',
                    index=models.Index(condition=models.Q(('ended_at__isnull', True), ('kind', 'wait')), fields=['until'], name='django_jobs_step_open_wait'),
                ),
            ],
        ),
    ]
