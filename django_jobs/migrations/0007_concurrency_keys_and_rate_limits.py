"""Concurrency keys and rate limits: the functions the claim calls to decide which jobs of
keys and rate-limited types may start (see ``_ADMIT_KEYS`` and ``_ADMIT_RATES`` in
``django_jobs/transitions/execution.py``), and a trigger that wakes the workers when a key
frees up.

Why functions: the claim calls them only when its batch holds a job with a key or of a
rate-limited type (an InitPlan evaluated at the first such row), so other batches pay nothing
for them; PL/pgSQL keeps their plans for the session, where the same SQL inlined in the claim
would be planned again at every claim; and each statement of a (volatile) function takes a
fresh snapshot, which is what makes the count of a key's running jobs exact once its row is
locked. The claim's statement stays under psycopg's 4 KiB cache limit too.
"""

from django.db import migrations, models
import django_jobs.models

CREATE_SQL = """
-- The running jobs of one concurrency key, by the partial index django_jobs_key_running.
-- PL/pgSQL, not SQL: the planner would parse a SQL function's body at every claim it plans, to
-- see whether it can inline it, even for a batch without a key, which never calls it.
CREATE FUNCTION django_jobs_running_with_key(job_type text, job_key text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM django_jobs_job
            WHERE status = 'running' AND type = job_type AND concurrency_key = job_key);
END
$$;

-- The starts of a rate window still within it, oldest first.
CREATE FUNCTION django_jobs_recent_starts(starts timestamptz[], seconds float8) RETURNS timestamptz[]
LANGUAGE sql STABLE AS $$
    SELECT ARRAY(SELECT s FROM unnest(starts) s WHERE s > now() - make_interval(secs => seconds) ORDER BY s)
$$;

-- Tells the workers of these queues that jobs are due then: their listeners set a timer.
CREATE FUNCTION django_jobs_notify_due(queues text[], due timestamptz) RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT count(pg_notify('django_jobs', q || ' ' || round(extract(epoch FROM due - now()), 3)))
    FROM unnest(queues) q
$$;

-- Of these candidates (in claim order), the ones their concurrency key lets start now.
-- A key's row is the lock that serializes the claims of the key: rows are created in order (a
-- concurrent claim creating the same one waits for this claim, never in a cycle), then locked
-- with SKIP LOCKED (a key another claim is deciding on is left for the next claim, nobody
-- waits). Only then are the key's running jobs counted: that statement's snapshot is taken
-- after the lock, so every claim that started jobs of the key before has committed and is
-- counted (a job that ended since may still be counted: the error is on the safe side).
CREATE FUNCTION django_jobs_admit_keys(ids bigint[], types text[], keys text[], limits int[])
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    locked_types text[];
    locked_keys text[];
    admitted bigint[];
BEGIN
    INSERT INTO django_jobs_concurrencykey (type, key)
    SELECT DISTINCT t, k FROM unnest(types, keys) AS c(t, k) ORDER BY 1, 2
    ON CONFLICT DO NOTHING;
    SELECT array_agg(type), array_agg(key) INTO locked_types, locked_keys FROM (
        SELECT type, key FROM django_jobs_concurrencykey
        WHERE (type, key) IN (SELECT * FROM unnest(types, keys)) FOR UPDATE SKIP LOCKED
    ) AS locked;
    SELECT array_agg(id) INTO admitted FROM (
        SELECT id, t, k, lim, row_number() OVER (PARTITION BY t, k ORDER BY n) AS nth
        FROM unnest(ids, types, keys, limits) WITH ORDINALITY AS c(id, t, k, lim, n)
        WHERE (t, k) IN (SELECT * FROM unnest(locked_types, locked_keys))
    ) AS c
    WHERE nth <= lim - django_jobs_running_with_key(t, k);
    RETURN coalesce(admitted, '{}');
END
$$;

-- Of these candidates (in claim order, all starting now), the ones their type's rate window
-- lets start, across all workers: a job may start while fewer than the type's limit of starts
-- are more recent than now() minus the window, which bounds the starts in *any* window of that
-- length. The window row is locked with SKIP LOCKED (a window another claim is taking starts
-- from is left for the next claim) and FOR UPDATE reads its newest version, so two claims
-- never take the same start. A claim that fills a window says when it opens again.
CREATE FUNCTION django_jobs_admit_starts(
    ids bigint[], types text[], queues text[], rate_types text[], caps int[], seconds float8[]
) RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    w record;
    recent timestamptz[];
    taken bigint[];
    admitted bigint[] := '{}';
BEGIN
    FOR w IN
        SELECT r.type, r.starts, l.cap, l.secs
        FROM django_jobs_ratewindow r JOIN unnest(rate_types, caps, seconds) AS l(t, cap, secs) ON l.t = r.type
        WHERE r.type = ANY(types) ORDER BY r.type FOR UPDATE OF r SKIP LOCKED
    LOOP
        recent := django_jobs_recent_starts(w.starts, w.secs);
        SELECT array_agg(id ORDER BY n) INTO taken
        FROM unnest(ids, types) WITH ORDINALITY AS c(id, t, n) WHERE t = w.type;
        taken := taken[1:greatest(w.cap - cardinality(recent), 0)];
        CONTINUE WHEN coalesce(cardinality(taken), 0) = 0;
        admitted := admitted || taken;
        recent := recent || array_fill(now(), ARRAY[cardinality(taken)]);
        UPDATE django_jobs_ratewindow SET starts = recent WHERE type = w.type;
        IF cardinality(recent) >= w.cap THEN
            PERFORM django_jobs_notify_due(
                ARRAY(SELECT DISTINCT q FROM unnest(types, queues) AS c(t, q) WHERE t = w.type),
                recent[1] + make_interval(secs => w.secs)
            );
        END IF;
    END LOOP;
    RETURN admitted;
END
$$;

-- A keyed job that leaves running frees a slot of its key: the workers of its queue claim.
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
DROP TRIGGER IF EXISTS django_jobs_notify_key_released ON django_jobs_job;
DROP FUNCTION IF EXISTS django_jobs_notify_key_released();
DROP FUNCTION IF EXISTS django_jobs_admit_starts(bigint[], text[], text[], text[], int[], float8[]);
DROP FUNCTION IF EXISTS django_jobs_admit_keys(bigint[], text[], text[], int[]);
DROP FUNCTION IF EXISTS django_jobs_notify_due(text[], timestamptz);
DROP FUNCTION IF EXISTS django_jobs_recent_starts(timestamptz[], float8);
DROP FUNCTION IF EXISTS django_jobs_running_with_key(text, text);
"""


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0006_queue_pause")]

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
            ],
        ),
        migrations.CreateModel(
            name="RateWindow",
            fields=[
                ("type", models.CharField(max_length=200, primary_key=True, serialize=False)),
                (
                    "starts",
                    django_jobs.models.TimestampArray(default=list),
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
