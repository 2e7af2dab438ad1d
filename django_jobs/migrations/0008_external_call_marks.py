"""Marks before external calls: one row per ``ctx.external_call(name)`` an execution entered,
which the reaper reads when the execution is lost; and, on each job, what a lost execution that
marked a call leads to (NULL for types that mark none, whose ``on_lost`` decides).

Cheap on a large job table: the column is nullable and has no default, so adding it rewrites
nothing; existing jobs keep NULL (their type's on_lost decides, as before).
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0007_concurrency_keys_and_rate_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='on_lost_in_call',
            field=models.CharField(blank=True, max_length=20, null=True),
        ),
        migrations.CreateModel(
            name='ExternalCall',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('execution_id', models.UUIDField()),
                ('name', models.CharField(max_length=100)),
                ('started_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('ended_at', models.DateTimeField(blank=True, null=True)),
                ('exception', models.CharField(blank=True, max_length=300, null=True)),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='external_calls', to='django_jobs.job')),
            ],
            options={
                'ordering': ('job_id', 'id'),
                'indexes': [models.Index(fields=['job', 'execution_id'], name='django_jobs_call_execution')],
            },
        ),
    ]
