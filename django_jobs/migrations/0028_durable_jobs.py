"""Durable jobs (docs/durable-jobs.md): three new tables, and a new event kind.

- ``django_jobs_jobstep``: what each position of a durable job's handler recorded (a step's
  result, a sleep's wake time, a wait's signal or timeout), unique by ``(job, sequence)`` and by
  ``(job, name)``; the first unique index serves every read of a job's records;
- ``django_jobs_jobsignal``: the signals sent to a job, the first of a name only;
- ``django_jobs_signalkey``: the key a job was given at enqueue, by which a webhook signals it.

The job table is not touched: a sleeping or waiting job is ``pending`` with a later
``available_at``, which the claim and its indexes already handle. New tables only, no rewrite.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0027_producer_controls'),
    ]

    operations = [
        migrations.AlterField(
            model_name='jobevent',
            name='kind',
            field=models.CharField(choices=[('retry_scheduled', 'Retry scheduled'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('released', 'Released by its worker'), ('recovered', 'Recovered by the reaper'), ('needs_review', 'Parked for review'), ('manual_retry', 'Retried by an operator'), ('cancel_requested', 'Cancellation requested'), ('resolved', 'Resolved by an operator'), ('reconciled', 'Reconciled: the effect had already happened'), ('restore_released', 'Released from a restore hold'), ('due', 'Due: the jobs it waited for ended'), ('stopped', 'Stopped by its workflow'), ('resumed', 'Resumed: waits again'), ('expired', 'Expired: not started by its deadline'), ('suspended', 'Suspended: sleeps or waits for a signal')], max_length=30),
        ),
        migrations.CreateModel(
            name='SignalKey',
            fields=[
                ('key', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='signal_key', to='django_jobs.job')),
            ],
        ),
        migrations.CreateModel(
            name='JobSignal',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=100)),
                ('key', models.CharField(max_length=200)),
                ('data', models.JSONField(blank=True, null=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='durable_signals', to='django_jobs.job')),
            ],
            options={
                'ordering': ('job_id', 'id'),
                'constraints': [models.UniqueConstraint(fields=('job', 'name'), name='django_jobs_signal_once')],
            },
        ),
        migrations.CreateModel(
            name='JobStep',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('sequence', models.PositiveIntegerField()),
                ('name', models.CharField(max_length=100)),
                ('kind', models.CharField(choices=[('step', 'Step'), ('sleep', 'Sleep'), ('wait', 'Wait for a signal')], max_length=10)),
                ('result', models.JSONField(blank=True, null=True)),
                ('until', models.DateTimeField(blank=True, null=True)),
                ('timed_out', models.BooleanField(default=False)),
                ('execution_id', models.UUIDField()),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('ended_at', models.DateTimeField(blank=True, null=True)),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='durable_steps', to='django_jobs.job')),
            ],
            options={
                'ordering': ('job_id', 'sequence'),
                'constraints': [models.UniqueConstraint(fields=('job', 'sequence'), name='django_jobs_step_position'), models.UniqueConstraint(fields=('job', 'name'), name='django_jobs_step_name')],
            },
        ),
    ]
