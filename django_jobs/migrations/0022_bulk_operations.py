"""Bulk operations: an operator's retry or cancel of every job a filter matches, recorded as
one operation (who, why, which filter, counts) with the jobs it was started on. Two new tables;
the job table is not touched."""

import django.db.models.deletion
import django.db.models.expressions
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0021_unique_keys_kept_while_waiting'),
    ]

    operations = [
        migrations.CreateModel(
            name='BulkOperation',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('action', models.CharField(choices=[('retry', 'Retry'), ('cancel', 'Cancel')], max_length=10)),
                ('state', models.CharField(choices=[('running', 'Running'), ('done', 'Done'), ('cancelled', 'Cancelled')], default='running', max_length=10)),
                ('filter', models.JSONField()),
                ('actor', models.CharField(max_length=150)),
                ('reason', models.TextField()),
                ('pace', models.PositiveIntegerField()),
                ('total', models.PositiveIntegerField()),
                ('done', models.PositiveIntegerField(default=0)),
                ('skipped', models.PositiveIntegerField(default=0)),
                ('last_job_id', models.BigIntegerField(default=0)),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('cancelled_by', models.CharField(blank=True, default='', max_length=150)),
                ('cancel_reason', models.TextField(blank=True, default='')),
            ],
            options={
                'ordering': ('-id',),
                'constraints': [models.CheckConstraint(condition=models.Q(('done__lte', django.db.models.expressions.CombinedExpression(models.F('total'), '-', models.F('skipped')))), name='django_jobs_bulk_counts_add_up')],
            },
        ),
        migrations.CreateModel(
            name='BulkOperationJob',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('job_id', models.BigIntegerField()),
                ('seen_status', models.CharField(max_length=20)),
                ('seen_execution', models.UUIDField(blank=True, null=True)),
                ('seen_manual_retries', models.PositiveIntegerField(default=0)),
                ('outcome', models.CharField(blank=True, choices=[('done', 'Done'), ('changed', 'Skipped: it changed since'), ('key_held', 'Skipped: another live job holds its unique key'), ('gone', 'Skipped: it no longer exists')], max_length=10, null=True)),
                ('operation', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='jobs', to='django_jobs.bulkoperation')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('operation', 'job_id'), name='django_jobs_bulk_job_once')],
            },
        ),
    ]
