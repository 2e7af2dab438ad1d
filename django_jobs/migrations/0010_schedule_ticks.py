"""Schedule ticks: one row per tick of a periodic job, keyed by (schedule, tick time).

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
            name='ScheduleTick',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('schedule', models.CharField(max_length=200)),
                ('tick_at', models.DateTimeField()),
                ('outcome', models.CharField(choices=[('enqueued', 'Enqueued'), ('skipped', 'Skipped: previous run still active'), ('missed', 'Missed: too late to run')], max_length=20)),
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
