"""Concurrency keys and rate limits.

The running count of each concurrency key is kept by triggers, not by the code paths that
move jobs: the claim, outcome writes, the reaper, operators and factories in tests all move
jobs into and out of ``running``, and none of them can forget the count. The UPDATE trigger is
limited to statements that set ``status``, and its WHEN clause is tested in C: heartbeats and
jobs without a key never run its function. A keyed job that leaves ``running`` also notifies
its queue, so that a job waiting for its key is claimed at once, not at the next poll.
"""

import django.contrib.postgres.fields
from django.db import migrations, models

CREATE_TRIGGERS = """
CREATE FUNCTION django_jobs_count_running_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = 'running' AND OLD.concurrency_key IS NOT NULL THEN
        UPDATE django_jobs_concurrencykey SET running = running - 1
        WHERE type = OLD.type AND key = OLD.concurrency_key AND running > 0;
        PERFORM pg_notify('django_jobs', OLD.queue);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = 'running' AND NEW.concurrency_key IS NOT NULL THEN
        INSERT INTO django_jobs_concurrencykey (type, key, running)
        VALUES (NEW.type, NEW.concurrency_key, 1)
        ON CONFLICT (type, key) DO UPDATE SET running = django_jobs_concurrencykey.running + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER django_jobs_count_running_keys_insert AFTER INSERT ON django_jobs_job
FOR EACH ROW WHEN (NEW.status = 'running' AND NEW.concurrency_key IS NOT NULL)
EXECUTE FUNCTION django_jobs_count_running_keys();

CREATE TRIGGER django_jobs_count_running_keys_update AFTER UPDATE OF status ON django_jobs_job
FOR EACH ROW WHEN ((OLD.status = 'running') <> (NEW.status = 'running')
                   AND (OLD.concurrency_key IS NOT NULL OR NEW.concurrency_key IS NOT NULL))
EXECUTE FUNCTION django_jobs_count_running_keys();

CREATE TRIGGER django_jobs_count_running_keys_delete AFTER DELETE ON django_jobs_job
FOR EACH ROW WHEN (OLD.status = 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION django_jobs_count_running_keys();

-- TRUNCATE fires no row trigger: the counts go with the jobs they count. (DELETE, as a
-- TRUNCATE of both tables in one statement, Django's flush, cannot truncate one again.)
CREATE FUNCTION django_jobs_forget_running_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM django_jobs_concurrencykey;
    RETURN NULL;
END
$$;

CREATE TRIGGER django_jobs_forget_running_keys AFTER TRUNCATE ON django_jobs_job
FOR EACH STATEMENT EXECUTE FUNCTION django_jobs_forget_running_keys();
"""

DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS django_jobs_forget_running_keys ON django_jobs_job;
DROP TRIGGER IF EXISTS django_jobs_count_running_keys_delete ON django_jobs_job;
DROP TRIGGER IF EXISTS django_jobs_count_running_keys_update ON django_jobs_job;
DROP TRIGGER IF EXISTS django_jobs_count_running_keys_insert ON django_jobs_job;
DROP FUNCTION IF EXISTS django_jobs_forget_running_keys();
DROP FUNCTION IF EXISTS django_jobs_count_running_keys();
"""


class Migration(migrations.Migration):

    dependencies = [("django_jobs", "0005_notify_pending_jobs")]

    operations = [
        migrations.CreateModel(
            name='ConcurrencyKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('type', models.CharField(max_length=200)),
                ('key', models.CharField(max_length=200)),
                ('running', models.IntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='RateWindow',
            fields=[
                ('type', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('starts', django.contrib.postgres.fields.ArrayField(base_field=models.DateTimeField(), default=list, size=None)),
            ],
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_key',
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_limit',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.UniqueConstraint(condition=models.Q(('concurrency_key__isnull', False), ('concurrency_limit', 1), ('status', 'running')), fields=('type', 'concurrency_key'), name='django_jobs_key_running_once'),
        ),
        migrations.AddConstraint(
            model_name='concurrencykey',
            constraint=models.UniqueConstraint(fields=('type', 'key'), name='django_jobs_concurrency_key_unique'),
        ),
        migrations.RunSQL(CREATE_TRIGGERS, DROP_TRIGGERS),
    ]
