"""Wake-up by LISTEN/NOTIFY: whatever makes a job pending tells the workers, at commit.

Triggers, not calls in each code path: enqueue, enqueue_many, retries, give-backs, the reaper
and operators' retries all write pending rows, and none of them can forget to notify. The
notification is sent on the ``django_jobs`` channel in the writing transaction, so it is
delivered at commit and never for a rolled-back job. Its payload is the queue's name for a job
due now, or the queue's name, a space and the seconds until the job is due.

One INSERT statement (a bulk ``enqueue_many`` of thousands) sends one notification per queue;
PostgreSQL also folds identical notifications of one transaction into one. An UPDATE notifies
only for rows that *become* pending (a retry, a recovery): the claim, the heartbeat and the
outcome of a completed job skip the trigger in C, without running its function.
"""

from django.db import migrations

CREATE = """
CREATE FUNCTION django_jobs_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('django_jobs', message) FROM (
        SELECT queue AS message FROM inserted
        WHERE status = 'pending' AND available_at <= now() GROUP BY queue
        UNION ALL
        SELECT queue || ' ' || round(extract(epoch FROM min(available_at) - now()), 3) FROM inserted
        WHERE status = 'pending' AND available_at > now() GROUP BY queue
    ) AS notifications;
    RETURN NULL;
END
$$;

CREATE TRIGGER django_jobs_notify_inserted AFTER INSERT ON django_jobs_job
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION django_jobs_notify_inserted();

CREATE FUNCTION django_jobs_notify_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.available_at <= now() THEN
        PERFORM pg_notify('django_jobs', NEW.queue);
    ELSE
        PERFORM pg_notify('django_jobs', NEW.queue || ' ' || round(extract(epoch FROM NEW.available_at - now()), 3));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER django_jobs_notify_pending AFTER UPDATE ON django_jobs_job
FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status <> 'pending')
EXECUTE FUNCTION django_jobs_notify_pending();
"""

DROP = """
DROP TRIGGER IF EXISTS django_jobs_notify_pending ON django_jobs_job;
DROP TRIGGER IF EXISTS django_jobs_notify_inserted ON django_jobs_job;
DROP FUNCTION IF EXISTS django_jobs_notify_pending();
DROP FUNCTION IF EXISTS django_jobs_notify_inserted();
"""


class Migration(migrations.Migration):
    dependencies = [("django_jobs", "0004_job_return_value")]

    operations = [migrations.RunSQL(CREATE, DROP)]
