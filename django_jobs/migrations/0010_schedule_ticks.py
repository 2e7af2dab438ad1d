"""Schedule ticks: one row per tick of a periodic job, keyed by (schedule, tick time), and
the operators' disable / enable / run-now of schedules.

The unique constraint is what makes a tick fire once however many workers run.
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0009_claim_indexes_end_with_version'),
    ]

    operations = [
        migrations.CreateModel(
            name='ScheduleState',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('disabled_at', models.DateTimeField(blank=True, null=True)),
                ('disabled_by', models.CharField(blank=True, max_length=150, null=True)),
                ('reason', models.TextField(blank=True, null=True)),
            ],
            options={
                'ordering': ('name',),
                'permissions': (('manage_schedule', 'Can disable, enable and run schedules now'),),
            },
        ),
        migrations.CreateModel(
            name='ScheduleEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('schedule', models.CharField(max_length=200)),
                ('kind', models.CharField(choices=[('disabled', 'Disabled'), ('enabled', 'Enabled'), ('run_now', 'Run now')], max_length=20)),
                ('actor', models.CharField(max_length=150)),
                ('reason', models.TextField()),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'ordering': ('schedule', 'id'),
                'indexes': [models.Index(fields=['schedule', 'id'], name='django_jobs_schedule_event')],
            },
        ),
        migrations.CreateModel(
            name='ScheduleTick',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('schedule', models.CharField(max_length=200)),
                ('tick_at', models.DateTimeField()),
                ('outcome', models.CharField(choices=[('enqueued', 'Enqueued'), ('skipped', 'Skipped: previous run still active'), ('missed', 'Missed: too late to run'), ('disabled', 'Disabled')], max_length=20)),
                ('coalesced', models.IntegerField(default=0)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('worker_id', models.CharField(blank=True, max_length=200, null=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'ordering': ('schedule', '-tick_at'),
                'constraints': [models.UniqueConstraint(fields=('schedule', 'tick_at'), name='django_jobs_schedule_tick_once')],
            },
        ),
    ]
