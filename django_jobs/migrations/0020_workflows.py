"""Workflows: chains, groups and their callbacks (``django_jobs.workflows``).

- Three new tables: ``workflow``, ``barrier`` (what waiting steps wait for, a count per row),
  ``workflowstep`` (each member job's place).
- The job table gains ``workflow_id`` (nullable, no default: a change of the catalog only, no
  rewrite) and two partial indexes that hold member jobs alone (empty until workflows are used).
- The status ``waiting``: the check of valid statuses is replaced ``NOT VALID``, then validated.
  All of it is one transaction, which keeps the ACCESS EXCLUSIVE lock the new column took while
  the two indexes are built and the check validated: the job table is blocked for about a second
  per million jobs (docs/upgrading.md).
- The triggers that count member jobs as they end (``transitions.workflow_triggers``).

Migration 0021 widens the unique keys to waiting jobs, with indexes built concurrently.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from django_jobs.transitions import workflow_triggers

VALID_STATUSES = """
ALTER TABLE django_jobs_job DROP CONSTRAINT django_jobs_status_valid;
ALTER TABLE django_jobs_job ADD CONSTRAINT django_jobs_status_valid CHECK (status IN
    ('waiting', 'pending', 'running', 'completed', 'failed', 'skipped', 'cancelled', 'needs_review')) NOT VALID;
ALTER TABLE django_jobs_job VALIDATE CONSTRAINT django_jobs_status_valid;
"""
OLD_VALID_STATUSES = """
ALTER TABLE django_jobs_job DROP CONSTRAINT django_jobs_status_valid;
ALTER TABLE django_jobs_job ADD CONSTRAINT django_jobs_status_valid CHECK (status IN
    ('pending', 'running', 'completed', 'failed', 'skipped', 'cancelled', 'needs_review'));
"""


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0019_restore_release_settles_jobs'),
    ]

    operations = [
        migrations.CreateModel(
            name='Barrier',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('size', models.PositiveIntegerField()),
                ('remaining', models.IntegerField()),
                ('failed', models.IntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='Workflow',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('kind', models.CharField(choices=[('chain', 'Chain'), ('group', 'Group')], max_length=10)),
                ('name', models.CharField(blank=True, default='', max_length=200)),
                ('size', models.PositiveIntegerField()),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'ordering': ('-id',),
            },
        ),
        migrations.CreateModel(
            name='WorkflowStep',
            fields=[
                ('job', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='step', serialize=False, to='django_jobs.job')),
                ('position', models.PositiveIntegerField()),
                ('stage', models.PositiveIntegerField()),
                ('role', models.CharField(choices=[('step', 'Step'), ('on_success', 'On success'), ('on_failure', 'On failure'), ('on_complete', 'On complete')], default='step', max_length=12)),
                ('runs_if', models.CharField(choices=[('succeeded', 'They all completed (or skipped)'), ('failed', 'At least one failed or was cancelled'), ('ended', 'They ended, however')], default='succeeded', max_length=10)),
                ('delay', models.FloatField(default=0.0)),
                ('stopped', models.BooleanField(default=False)),
            ],
            options={
                'ordering': ('workflow_id', 'position'),
            },
        ),
        migrations.AddField(
            model_name='job',
            name='workflow_id',
            field=models.BigIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('waiting', 'Waiting'), ('pending', 'Pending'), ('running', 'Running'), ('completed', 'Completed'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('needs_review', 'Needs review')], default='pending', max_length=20),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='from_status',
            field=models.CharField(blank=True, choices=[('waiting', 'Waiting'), ('pending', 'Pending'), ('running', 'Running'), ('completed', 'Completed'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('needs_review', 'Needs review')], max_length=20, null=True),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='kind',
            field=models.CharField(choices=[('retry_scheduled', 'Retry scheduled'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('released', 'Released by its worker'), ('recovered', 'Recovered by the reaper'), ('needs_review', 'Parked for review'), ('manual_retry', 'Retried by an operator'), ('cancel_requested', 'Cancellation requested'), ('resolved', 'Resolved by an operator'), ('reconciled', 'Reconciled: the effect had already happened'), ('restore_released', 'Released from a restore hold'), ('due', 'Due: the jobs it waited for ended'), ('stopped', 'Stopped by its workflow'), ('resumed', 'Resumed: waits again')], max_length=30),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='to_status',
            field=models.CharField(blank=True, choices=[('waiting', 'Waiting'), ('pending', 'Pending'), ('running', 'Running'), ('completed', 'Completed'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('needs_review', 'Needs review')], max_length=20, null=True),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('workflow_id__isnull', False)), fields=['workflow_id', 'id'], include=('status',), name='django_jobs_workflow_members'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('status__in', ['needs_review', 'pending', 'running', 'waiting']), ('workflow_id__isnull', False)), fields=['workflow_id'], name='django_jobs_workflow_live'),
        ),
        migrations.RunSQL(
            VALID_STATUSES,
            OLD_VALID_STATUSES,
            state_operations=[
                migrations.RemoveConstraint(model_name='job', name='django_jobs_status_valid'),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.CheckConstraint(condition=models.Q(('status__in', ['waiting', 'pending', 'running', 'completed', 'failed', 'skipped', 'cancelled', 'needs_review'])), name='django_jobs_status_valid'),
                ),
            ],
        ),
        migrations.AddField(
            model_name='barrier',
            name='parent',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='leaves', to='django_jobs.barrier'),
        ),
        migrations.AddField(
            model_name='barrier',
            name='workflow',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='barriers', to='django_jobs.workflow'),
        ),
        migrations.AddField(
            model_name='workflowstep',
            name='feeds',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='django_jobs.barrier'),
        ),
        migrations.AddField(
            model_name='workflowstep',
            name='waits_on',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='django_jobs.barrier'),
        ),
        migrations.AddField(
            model_name='workflowstep',
            name='workflow',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='django_jobs.workflow'),
        ),
        migrations.AddIndex(
            model_name='barrier',
            index=models.Index(fields=['workflow', 'id'], name='django_jobs_barrier_workflow'),
        ),
        migrations.AddConstraint(
            model_name='barrier',
            constraint=models.CheckConstraint(condition=models.Q(('failed__gte', 0), ('remaining__gte', 0)), name='django_jobs_barrier_counts'),
        ),
        migrations.AddIndex(
            model_name='workflowstep',
            index=models.Index(fields=['workflow', 'position'], name='django_jobs_step_workflow'),
        ),
        migrations.AddIndex(
            model_name='workflowstep',
            index=models.Index(condition=models.Q(('waits_on__isnull', False)), fields=['waits_on'], name='django_jobs_step_waits_on'),
        ),
        migrations.AddIndex(
            model_name='workflowstep',
            index=models.Index(condition=models.Q(('feeds__isnull', False)), fields=['feeds', 'job'], name='django_jobs_step_feeds'),
        ),
        migrations.RunSQL(workflow_triggers.INSTALL_TRIGGERS, workflow_triggers.DROP_TRIGGERS),
    ]
