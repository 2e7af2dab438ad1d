"""The workflow's rules inside the arrows that cross them (``transitions.workflow_triggers``):

- the ``stopped`` mark is cleared by whatever takes a step out of ``cancelled``, so a step an
  operator cancels later is never resumed by a retry of another job;
- ``django_jobs_step_gate()``: where an operator's retry sends a step that waits for others
  (``waiting`` while they have not all ended, ``pending`` when its condition holds, refused
  otherwise), read from the leaves of a tree, which count the transaction's own retries.

And a bulk operation's skipped job says why (``BulkOperationJob.detail``: a nullable column
without a default, added to the catalogue only).

The functions are replaced (``CREATE OR REPLACE``) and no table is rewritten: the previous
release's code runs unchanged beside them.
"""

from django.db import migrations, models

from django_jobs.transitions import workflow_triggers


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0025_restored_steps_wait_then_reconcile_or_review'),
    ]

    operations = [
        migrations.RunSQL(
            workflow_triggers.FUNCTIONS,
            "DROP FUNCTION IF EXISTS django_jobs_step_gate(bigint)",
        ),
        migrations.AddField(
            model_name='bulkoperationjob',
            name='detail',
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='bulkoperationjob',
            name='outcome',
            field=models.CharField(blank=True, choices=[('done', 'Done'), ('changed', 'Skipped: it changed since'), ('key_held', 'Skipped: another live job holds its unique key'), ('gone', 'Skipped: it no longer exists'), ('refused', 'Skipped: its workflow refused it')], max_length=10, null=True),
        ),
    ]
