"""The arrows a member job's end causes: a waiting step made due or stopped when the jobs it
waits for have ended, and a stopped step resumed when one of them is retried.

**Counted where the job ends.** A trigger on the job table (``MEMBER_MOVED``) sees every change
of status of a member job, whoever writes it: a worker's outcome, the reaper, an operator's
cancel, retry or resolve, a restore hold's release. A job that ended (completed, skipped,
failed, cancelled) is counted out of the barrier it feeds, and a job that an operator's retry
takes back from ``failed`` or ``cancelled`` is counted in again, in the same transaction as the
write that moved it. So no path can end a member and forget its workflow, and a crash can only
lose both or neither.

**Exactly once.** The barrier's row is updated by each count, so two jobs ending at once are
counted one after the other (the row's lock), and exactly one of them takes ``remaining`` to
zero: that transaction makes the waiting steps due (``waiting`` → ``pending``) or stops them
(``waiting`` → ``cancelled``), each by a compare-and-set on ``status = 'waiting'``. A step that
already left ``waiting`` is never touched again: a retry of a job it waited for, after it ran,
does not run it twice.

**No hot row.** A barrier of more than 64 jobs is a tree (``workflow_plan.LEAF_SIZE``): each
job's end updates its leaf, and only the end that empties a leaf updates the parent. That
update is deferred to the commit (a constraint trigger, ``LEAF_EMPTIED``), after every leaf the
transaction counts in, so transactions take leaves before parents and never wait on each other
in a circle.

**What ``stopped`` means.** A step its workflow cancelled (``waiting`` → ``cancelled``, a
``stopped`` event) is marked ``stopped``, and only a marked step waits again when a job it waits
for is retried. The mark is cleared by whatever takes the job out of ``cancelled`` (its
workflow resuming it, an operator's retry): a step cancelled later by an operator is never
brought back by a retry of another job.

**Where an operator's retry sends a step** (``STEP_GATE``, read by ``manual_retry``):
``pending`` once the jobs it waits for all ended and its condition holds, else back to
``waiting``, to be decided when its barrier next opens (a step that runs only after a failure,
when they all succeeded, is refused: nothing could make it due). So a set of retries ends the
same in any order: retrying a stopped ``on_success`` before the failed member it waits for,
after it, or in the same transaction, leaves it waiting for that member's next end.

The functions below are installed by migration 0020 from these texts, and again by migration
0026 (``FUNCTIONS``). A change to them needs a migration of its own that installs
``FUNCTIONS`` again on databases already migrated.
"""

from __future__ import annotations

from django_jobs.states import ENDED_STATUSES, SUCCEEDED_STATUSES
from django_jobs.workflow_plan import SUCCEEDED, runs_condition

_ENDED = ", ".join(f"'{status}'" for status in sorted(ENDED_STATUSES))
_FAILED = ", ".join(f"'{status}'" for status in sorted(ENDED_STATUSES - SUCCEEDED_STATUSES))

# The steps waiting on a barrier whose jobs have all ended: due if their condition holds, else
# stopped with the reason. ``why`` names the job that failed, when one job was waited for.
#
# A step a restore hold's release settled (code RESTORED) may have run after the restore point:
# due, it asks its type's reconcile first, as a pending job so marked does; one whose type cannot
# ask (the release set its ``on_lost`` to needs_review) is parked for review instead, never run
# blind. Replaced by migration 0025 on databases migrated before (and 0026: ``FUNCTIONS``).
_OPEN = f"""
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
               {runs_condition("s.runs_if", "any_failed")} AS runs
        FROM django_jobs_workflowstep s WHERE s.waits_on_id = barrier
    ), due AS (
        UPDATE django_jobs_job j SET
            status = CASE WHEN j.last_error_code = 'RESTORED' AND j.on_lost = 'needs_review'
                          THEN 'needs_review' ELSE 'pending' END,
            available_at = greatest(j.available_at, now() + make_interval(secs => w.delay)),
            ready = greatest(j.available_at, now() + make_interval(secs => w.delay)) <= now()
        FROM waiting w
        WHERE j.id = w.job_id AND w.runs AND j.status = 'waiting'
        RETURNING j.id, j.attempts, j.status, j.last_error_code, j.last_error
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
    INSERT INTO django_jobs_jobevent
        (job_id, kind, from_status, to_status, attempt, error_code, error, actor, reason)
    SELECT id, CASE WHEN status = 'needs_review' THEN 'needs_review' ELSE 'due' END, 'waiting', status,
           attempts,
           CASE WHEN status = 'needs_review' THEN last_error_code END,
           CASE WHEN status = 'needs_review' THEN last_error END,
           'workflow',
           CASE WHEN any_failed THEN 'the jobs it waited for ended: ' || why
                ELSE 'the jobs it waited for ended' END
    FROM due
    UNION ALL
    SELECT id, 'stopped', 'waiting', 'cancelled', attempts, NULL, NULL, 'workflow', last_error
    FROM stopped;
END
$$;
"""

# A barrier that had opened counts a job again (an operator retried a job that failed or was
# cancelled): the steps it stopped wait again, and so do the steps it made due that have not
# started since (pending, no attempt: an on_complete would run beside a member running again).
# A step that ran, or that an operator cancelled, stays as it is. A stopped step that a restore
# hold's release had settled before it was stopped (it never ran since) waits marked RESTORED
# again, so that once due it reconciles first, or is parked for review, as the release decided.
_REOPENED = """
CREATE OR REPLACE FUNCTION django_jobs_barrier_reopened(barrier bigint, retried bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    WITH resumed AS (
        UPDATE django_jobs_job j SET
            status = 'waiting', finished_at = NULL, cancel_requested_at = NULL,
            last_error_code = CASE WHEN j.execution_id IS NULL AND EXISTS (
                                       SELECT 1 FROM django_jobs_jobevent e
                                       WHERE e.job_id = j.id AND e.kind = 'restore_released')
                                   THEN 'RESTORED' END,
            last_error = NULL
        FROM django_jobs_workflowstep s
        WHERE s.waits_on_id = barrier AND s.stopped AND j.id = s.job_id AND j.status = 'cancelled'
        RETURNING j.id, j.attempts, 'cancelled' AS was
    ), undue AS (
        UPDATE django_jobs_job j SET status = 'waiting', ready = false
        FROM django_jobs_workflowstep s
        WHERE s.waits_on_id = barrier AND j.id = s.job_id AND j.status = 'pending' AND j.attempts = 0
        RETURNING j.id, j.attempts, 'pending' AS was
    ), unmarked AS (
        UPDATE django_jobs_workflowstep s SET stopped = false FROM resumed WHERE s.job_id = resumed.id
    )
    INSERT INTO django_jobs_jobevent (job_id, kind, from_status, to_status, attempt, actor, reason)
    SELECT id, 'resumed', was, 'waiting', attempts, 'workflow',
           CASE WHEN retried IS NULL THEN 'a job it waits for was retried'
                WHEN (SELECT status FROM django_jobs_job WHERE id = retried) = 'waiting'
                THEN format('job %s, which it waits for, waits again', retried)
                ELSE format('job %s, which it waits for, was retried', retried) END
    FROM (SELECT * FROM resumed UNION ALL SELECT * FROM undue) moved;
END
$$;
"""

# A member job changed status: count its end in the barrier it feeds (or count it again, taken
# back by a retry). A barrier without a parent that empties opens here; a leaf that empties or
# refills is counted in its parent at commit (LEAF_EMPTIED).
_MEMBER_MOVED = f"""
CREATE OR REPLACE FUNCTION django_jobs_member_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was_ended boolean := OLD.status IN ({_ENDED});
    is_ended boolean := NEW.status IN ({_ENDED});
    fed bigint;
    counted record;
BEGIN
    IF OLD.status = 'cancelled' THEN
        -- Whoever takes a job out of 'cancelled' (its workflow resuming it, an operator's
        -- retry) ends what its workflow's stop meant: if it is cancelled again, by an operator
        -- or by an arrow of its own, no retry of another job brings it back.
        UPDATE django_jobs_workflowstep SET stopped = false WHERE job_id = NEW.id AND stopped;
    END IF;
    IF was_ended = is_ended THEN
        RETURN NULL;
    END IF;
    SELECT feeds_id INTO fed FROM django_jobs_workflowstep WHERE job_id = NEW.id;
    IF fed IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE django_jobs_barrier SET
        remaining = remaining + CASE WHEN is_ended THEN -1 ELSE 1 END,
        failed = failed + CASE WHEN is_ended AND NEW.status IN ({_FAILED}) THEN 1
                               WHEN NOT is_ended AND OLD.status IN ({_FAILED}) THEN -1
                               ELSE 0 END
    WHERE id = fed
    RETURNING id, parent_id, remaining, failed INTO counted;
    IF counted.parent_id IS NULL THEN
        IF is_ended AND counted.remaining = 0 THEN
            PERFORM django_jobs_barrier_open(counted.id, counted.failed > 0, NEW.id);
        ELSIF NOT is_ended AND counted.remaining = 1 THEN
            PERFORM django_jobs_barrier_reopened(counted.id, NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
"""

# A leaf emptied (its last job ended) or refilled (a retry): its parent counts it, at commit.
_LEAF_EMPTIED = """
CREATE OR REPLACE FUNCTION django_jobs_leaf_emptied() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    emptied boolean := NEW.remaining = 0;
    counted record;
BEGIN
    UPDATE django_jobs_barrier SET
        remaining = remaining + CASE WHEN emptied THEN -1 ELSE 1 END,
        failed = failed + CASE WHEN emptied AND NEW.failed > 0 THEN 1
                               WHEN NOT emptied AND OLD.failed > 0 THEN -1
                               ELSE 0 END
    WHERE id = NEW.parent_id
    RETURNING id, remaining, failed INTO counted;
    IF emptied AND counted.remaining = 0 THEN
        PERFORM django_jobs_barrier_open(counted.id, counted.failed > 0, NULL);
    ELSIF NOT emptied AND counted.remaining = 1 THEN
        PERFORM django_jobs_barrier_reopened(counted.id, NULL);
    END IF;
    RETURN NULL;
END
$$;
"""

# Where an operator's retry sends a step that waits for others: 'pending' when they all ended
# and its condition holds; else back to 'waiting', to be decided when its barrier next opens:
# while one of them has not ended, and also when they ended and one failed or was cancelled
# for a step that runs only if they succeed (it waits for an operator's retry of that job, and
# explainjob names it; were it refused, the outcome of a set of retries would depend on which
# came first). 'refused' for a step that runs only after a failure when they all succeeded:
# no retry can ever make it due. NULL for a job that waits for nothing. The barrier's row is
# locked, so a job ending meanwhile is counted after this retry's commit, and then finds the
# step waiting. A tree is read from its leaves, which count this transaction's own retries at
# once (the parent counts them only at commit).
_STEP_GATE = f"""
CREATE OR REPLACE FUNCTION django_jobs_step_gate(step_job bigint)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    waits bigint;
    runs_if text;
    ended boolean;
    any_failed boolean;
BEGIN
    SELECT s.waits_on_id, s.runs_if INTO waits, runs_if
    FROM django_jobs_workflowstep s WHERE s.job_id = step_job;
    IF waits IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT b.remaining = 0, b.failed > 0 INTO ended, any_failed
    FROM django_jobs_barrier b WHERE b.id = waits FOR UPDATE;
    IF EXISTS (SELECT 1 FROM django_jobs_barrier l WHERE l.parent_id = waits) THEN
        SELECT bool_and(l.remaining = 0), bool_or(l.failed > 0) INTO ended, any_failed
        FROM django_jobs_barrier l WHERE l.parent_id = waits;
    END IF;
    IF NOT ended THEN
        RETURN 'waiting';
    ELSIF {runs_condition("runs_if", "any_failed")} THEN
        RETURN 'pending';
    ELSIF runs_if = '{SUCCEEDED}' THEN
        RETURN 'waiting';
    END IF;
    RETURN 'refused';
END
$$;
"""

_TRIGGERS = """
CREATE TRIGGER django_jobs_member_moved AFTER UPDATE OF status ON django_jobs_job
FOR EACH ROW WHEN (NEW.workflow_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION django_jobs_member_moved();
CREATE CONSTRAINT TRIGGER django_jobs_leaf_emptied AFTER UPDATE OF remaining ON django_jobs_barrier
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL AND (OLD.remaining = 0) <> (NEW.remaining = 0))
EXECUTE FUNCTION django_jobs_leaf_emptied();
"""

#: The functions, as they are now: each ``CREATE OR REPLACE``, so a migration that changes one
#: installs them all again (migration 0026 does).
FUNCTIONS = _OPEN + _REOPENED + _MEMBER_MOVED + _LEAF_EMPTIED + _STEP_GATE
#: What migration 0020 installs, and what it drops going back.
INSTALL_TRIGGERS = FUNCTIONS + _TRIGGERS
#: What migration 0025 installs: the barrier's opening as it is now.
OPEN_BARRIER = _OPEN
DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS django_jobs_leaf_emptied ON django_jobs_barrier;
DROP TRIGGER IF EXISTS django_jobs_member_moved ON django_jobs_job;
DROP FUNCTION IF EXISTS django_jobs_step_gate(bigint);
DROP FUNCTION IF EXISTS django_jobs_leaf_emptied();
DROP FUNCTION IF EXISTS django_jobs_member_moved();
DROP FUNCTION IF EXISTS django_jobs_barrier_reopened(bigint, bigint);
DROP FUNCTION IF EXISTS django_jobs_barrier_open(bigint, boolean, bigint);
"""

#: The name of the deferred trigger, for ``SET CONSTRAINTS … IMMEDIATE`` (tests that never commit).
LEAF_TRIGGER = "django_jobs_leaf_emptied"
