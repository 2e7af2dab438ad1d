"""A workflow's step that a restore hold's release settled waits for the jobs before it, then asks
its type's reconcile first or is parked for review: the function that opens a barrier is
replaced (``CREATE OR REPLACE``: no table is touched, no lock on the job table is taken).
Going back puts the previous function back, frozen here as it was.
"""

from django.db import migrations

from django_jobs.transitions import workflow_triggers

PREVIOUS_OPEN_BARRIER = """
CREATE OR REPLACE FUNCTION django_jobs_barrier_open(barrier bigint, any_failed boolean, last_job bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    why text;
    failures bigint;
    counted bigint;
BEGIN
    SELECT COALESCE(sum(l.failed), 0), COALESCE(sum(l.size), 0) INTO failures, counted
    FROM django_jobs_barrier l WHERE l.parent_id = barrier;
    IF counted = 0 THEN
        SELECT b.failed, b.size INTO failures, counted FROM django_jobs_barrier b WHERE b.id = barrier;
    END IF;
    IF counted = 1 AND last_job IS NOT NULL THEN
        why := format('job %s, which it waited for, ended %s', last_job,
                      (SELECT status FROM django_jobs_job WHERE id = last_job));
    ELSE
        why := format('%s of the %s jobs it waited for failed or were cancelled', failures, counted);
    END IF;
    WITH waiting AS (
        SELECT s.job_id, s.delay,
               (NOT any_failed AND s.runs_if IN ('ended', 'succeeded')) OR (any_failed AND s.runs_if IN ('ended', 'failed')) AS runs
        FROM django_jobs_workflowstep s WHERE s.waits_on_id = barrier
    ), due AS (
        UPDATE django_jobs_job j SET
            status = 'pending',
            available_at = greatest(j.available_at, now() + make_interval(secs => w.delay)),
            ready = greatest(j.available_at, now() + make_interval(secs => w.delay)) <= now()
        FROM waiting w
        WHERE j.id = w.job_id AND w.runs AND j.status = 'waiting'
        RETURNING j.id, j.attempts
    ), stopped AS (
        UPDATE django_jobs_job j SET
            status = 'cancelled', finished_at = now(), last_error_code = 'WORKFLOW_STOPPED',
            last_error = CASE WHEN any_failed THEN 'not run: ' || why
                              ELSE 'not run: every job it waited for succeeded' END
        FROM waiting w
        WHERE j.id = w.job_id AND NOT w.runs AND j.status = 'waiting'
        RETURNING j.id, j.attempts, j.last_error
    ), marked AS (
        UPDATE django_jobs_workflowstep s SET stopped = true FROM stopped WHERE s.job_id = stopped.id
    )
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason)
    SELECT id, 'due', 'waiting', 'pending', attempts, 'workflow',
           CASE WHEN any_failed THEN 'the jobs it waited for ended: ' || why
                ELSE 'the jobs it waited for ended' END
    FROM due
    UNION ALL
    SELECT id, 'stopped', 'waiting', 'cancelled', attempts, 'workflow', last_error FROM stopped;
END
$$;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0024_job_trace_context'),
    ]

    operations = [
        migrations.RunSQL(workflow_triggers.OPEN_BARRIER, PREVIOUS_OPEN_BARRIER),
    ]
