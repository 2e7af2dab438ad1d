"""Paused queues: the table the claim reads to skip them, the history of pauses and resumes,
and the notification that tells every worker at once.

A pause or a resume notifies on the ``django_jobs`` channel at commit, from a trigger (as
migration 0005 does for pending jobs): ``!paused NAME`` or ``!resumed NAME``. No queue name can
start with "!", so a worker never mistakes one for a queue that has new jobs.
"""

import django.db.models.functions.datetime
from django.db import migrations, models

NOTIFY = """
CREATE FUNCTION django_jobs_notify_queue_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('django_jobs',
                      CASE WHEN NEW.paused_at IS NULL THEN '!resumed ' ELSE '!paused ' END || NEW.name);
    RETURN NULL;
END
$$;

CREATE TRIGGER django_jobs_notify_queue_paused AFTER INSERT ON django_jobs_queue_state
FOR EACH ROW WHEN (NEW.paused_at IS NOT NULL)
EXECUTE FUNCTION django_jobs_notify_queue_state();

CREATE TRIGGER django_jobs_notify_queue_state AFTER UPDATE ON django_jobs_queue_state
FOR EACH ROW WHEN ((OLD.paused_at IS NULL) <> (NEW.paused_at IS NULL))
EXECUTE FUNCTION django_jobs_notify_queue_state();
"""

DROP_NOTIFY = """
DROP TRIGGER IF EXISTS django_jobs_notify_queue_state ON django_jobs_queue_state;
DROP TRIGGER IF EXISTS django_jobs_notify_queue_paused ON django_jobs_queue_state;
DROP FUNCTION IF EXISTS django_jobs_notify_queue_state();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0005_notify_pending_jobs'),
    ]

    operations = [
        migrations.CreateModel(
            name='Queue',
            fields=[
                ('name', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('paused_at', models.DateTimeField(blank=True, null=True)),
                ('paused_by', models.CharField(blank=True, max_length=150, null=True)),
                ('reason', models.TextField(blank=True, help_text='Why it was paused.', null=True)),
            ],
            options={
                'db_table': 'django_jobs_queue_state',
                'ordering': ('name',),
                'permissions': (('pause_queue', 'Can pause and resume queues'),),
                'constraints': [models.CheckConstraint(condition=models.Q(('name__regex', '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$')), name='django_jobs_queue_name_valid'), models.CheckConstraint(condition=models.Q(('paused_at__isnull', True), models.Q(('paused_by__isnull', False), ('reason__isnull', False)), _connector='OR'), name='django_jobs_queue_pause_says_who_and_why')],
            },
        ),
        migrations.CreateModel(
            name='QueueEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('queue', models.CharField(max_length=100)),
                ('kind', models.CharField(choices=[('paused', 'Paused'), ('resumed', 'Resumed')], max_length=20)),
                ('actor', models.CharField(max_length=150)),
                ('reason', models.TextField()),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'ordering': ('queue', 'id'),
                'indexes': [models.Index(fields=['queue', 'id'], name='django_jobs_queue_event')],
            },
        ),
        migrations.RunSQL(NOTIFY, DROP_NOTIFY),
    ]
