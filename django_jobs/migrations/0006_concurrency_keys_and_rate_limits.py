"""Concurrency keys and rate limits (see ``_ADMIT_KEYS`` and ``_ADMIT_RATES`` in
``django_jobs/transitions/execution.py``).

A keyed job that leaves ``running`` notifies its queue, so that a job waiting for its key is
claimed at once, not at the next poll. The trigger is limited to statements that set
``status``, and its WHEN clause is tested in C: jobs without a key never run its function.
It takes no lock: outcome writes of keyed jobs never wait for one another or for a claim.
"""

import django.contrib.postgres.fields
import django.db.models.functions.datetime
from django.db import migrations, models

CREATE_SQL = """
-- What the claim measures and says, named so that its statement stays short (psycopg caches the
-- parsing of statements up to 4 KiB). Plain SQL functions: the planner inlines them.
CREATE FUNCTION django_jobs_running_with_key(job_type text, job_key text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM django_jobs_job
    WHERE status = 'running' AND type = job_type AND concurrency_key = job_key
$$;

-- Tells the workers of these queues that jobs are due then (the listener sets a timer).
CREATE FUNCTION django_jobs_notify_due(queues text[], due timestamptz) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT count(pg_notify('django_jobs', q || ' ' || round(extract(epoch FROM due - now()), 3)))
    FROM unnest(queues) q
$$;

CREATE FUNCTION django_jobs_recent_starts(starts timestamptz[], seconds float8) RETURNS timestamptz[]
LANGUAGE sql STABLE AS $$
    SELECT ARRAY(SELECT s FROM unnest(starts) s WHERE s > now() - make_interval(secs => seconds) ORDER BY s)
$$;

CREATE FUNCTION django_jobs_notify_key_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('django_jobs', OLD.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER django_jobs_notify_key_released AFTER UPDATE OF status ON django_jobs_job
FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION django_jobs_notify_key_released();
"""

DROP_SQL = """
DROP FUNCTION IF EXISTS django_jobs_recent_starts(timestamptz[], float8);
DROP FUNCTION IF EXISTS django_jobs_notify_due(text[], timestamptz);
DROP FUNCTION IF EXISTS django_jobs_running_with_key(text, text);
DROP TRIGGER IF EXISTS django_jobs_notify_key_released ON django_jobs_job;
DROP FUNCTION IF EXISTS django_jobs_notify_key_released();
"""


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0005_notify_pending_jobs")]

    operations = [
        migrations.CreateModel(
            name="ConcurrencyKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("type", models.CharField(max_length=200)),
                ("key", models.CharField(max_length=200)),
                ("claims", models.BigIntegerField(default=0)),
                ("touched_at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
        ),
        migrations.CreateModel(
            name="RateWindow",
            fields=[
                ("type", models.CharField(max_length=200, primary_key=True, serialize=False)),
                (
                    "starts",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.DateTimeField(), default=list, size=None
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_key",
            field=models.CharField(blank=True, max_length=200, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="concurrency_limit",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("concurrency_key__isnull", False), ("status", "running")),
                fields=["type", "concurrency_key"],
                name="django_jobs_key_running",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("concurrency_key__isnull", False), ("concurrency_limit", 1), ("status", "running")
                ),
                fields=("type", "concurrency_key"),
                name="django_jobs_key_running_once",
            ),
        ),
        migrations.AddConstraint(
            model_name="concurrencykey",
            constraint=models.UniqueConstraint(
                fields=("type", "key"), name="django_jobs_concurrency_key_unique"
            ),
        ),
        migrations.RunSQL(CREATE_SQL, DROP_SQL),
    ]
