"""Claims read only the jobs they can take: pending jobs scheduled for later leave the claim
indexes until they are due, and the claim indexes begin with the job's kind (type and payload
version), so a worker never walks rows of types it does not run or versions it cannot read.

Safe on a live system, and in this order:

1. ``ready`` is added with a constant default: a change of the catalog only, no table rewrite.
2. A trigger sets it on every new job (enqueue, ``enqueue_many``, a schedule's tick, raw SQL):
   ready when due at its insert, not ready when scheduled for later. The statements that send a
   job back to pending (a retry, the reaper, an operator's retry) set it themselves: a trigger
   on UPDATE would lock every claimed and finished row once more before updating it.
3. The pending jobs already scheduled for later are marked not ready in batches of 5,000, each
   its own short transaction, newest first through the (status, -id) index.
4. The new claim indexes are built ``CONCURRENTLY``: writes go on while they are built.

Workers of the previous release keep claiming with the previous indexes, which 0014 drops:
run ``migrate django_jobs 0013``, roll out the workers, then ``migrate``. Going back is the
reverse (docs/scaling.md): ``migrate django_jobs 0012`` rebuilds what 0014 dropped, then drops
what this one built.
"""

from django.db import migrations, models

KEEP_READY = """
CREATE FUNCTION django_jobs_keep_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.ready := false;
    RETURN NEW;
END
$$;
CREATE TRIGGER django_jobs_keep_ready BEFORE INSERT ON django_jobs_job
FOR EACH ROW WHEN (NEW.status = 'pending' AND NEW.available_at > now())
EXECUTE FUNCTION django_jobs_keep_ready();
"""
DROP_KEEP_READY = """
DROP TRIGGER IF EXISTS django_jobs_keep_ready ON django_jobs_job;
DROP FUNCTION IF EXISTS django_jobs_keep_ready();
"""
# One batch: the next 5,000 pending rows below `below` (newest first), those of them scheduled
# for later marked not ready; returns the lowest id read, NULL when none is left.
MARK_LATER = """
WITH batch AS (
    SELECT id FROM django_jobs_job WHERE status = 'pending' AND id < %s ORDER BY id DESC LIMIT 5000
), marked AS (
    UPDATE django_jobs_job j SET ready = false FROM batch
    WHERE j.id = batch.id AND j.status = 'pending' AND j.ready AND j.available_at > now()
)
SELECT min(id) FROM batch
"""


def mark_later(apps, schema_editor):
    below = 2**63 - 1
    with schema_editor.connection.cursor() as cursor:
        while below is not None:
            cursor.execute(MARK_LATER, [below])
            (below,) = cursor.fetchone()


def built_concurrently(index, definition):
    """``index``, built by ``CREATE INDEX CONCURRENTLY`` (writes go on meanwhile); a build that
    failed half-way leaves an invalid index, which ``IF NOT EXISTS`` would keep: drop it first."""
    return [
        migrations.RunSQL(
            f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}",
            migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            f"CREATE INDEX CONCURRENTLY {index.name} ON django_jobs_job {definition}",
            f"DROP INDEX CONCURRENTLY IF EXISTS {index.name}",
            state_operations=[migrations.AddIndex(model_name='job', index=index)],
        ),
    ]


class Migration(migrations.Migration):
    atomic = False  # each batch and each concurrent index build commits by itself

    dependencies = [
        ('django_jobs', '0012_console_log_owed'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='ready',
            field=models.BooleanField(db_default=True, editable=False),
        ),
        migrations.RunSQL(KEEP_READY, DROP_KEEP_READY),
        migrations.RunPython(mark_later, migrations.RunPython.noop, elidable=True),
        *built_concurrently(
            models.Index(models.F('queue'), models.F('type'), models.F('version'), models.OrderBy(models.F('priority'), descending=True), models.F('available_at'), models.F('id'), condition=models.Q(('status', 'pending'), ('ready', True)), name='django_jobs_ready_queue'),
            "(queue, type, version, priority DESC, available_at, id) WHERE status = 'pending' AND ready",
        ),
        *built_concurrently(
            models.Index(models.F('type'), models.F('version'), models.OrderBy(models.F('priority'), descending=True), models.F('available_at'), models.F('id'), condition=models.Q(('status', 'pending'), ('ready', True)), name='django_jobs_ready'),
            "(type, version, priority DESC, available_at, id) WHERE status = 'pending' AND ready",
        ),
        *built_concurrently(
            models.Index(models.F('type'), models.F('version'), models.F('available_at'), condition=models.Q(('status', 'pending'), ('ready', False)), name='django_jobs_later'),
            "(type, version, available_at) WHERE status = 'pending' AND NOT ready",
        ),
    ]
