"""The ownership guard's status test, as the statements of many jobs at once write it.

Every write after a claim matches ``(id, execution_id, status = 'running')``. Written plainly,
``j.status = 'running'`` is estimated from the status column's statistics, and those say that
almost nothing runs: a few hundred jobs run at any moment beside many thousands finished, and
ANALYZE's sample rarely holds one. Given a batch of ids and that estimate, PostgreSQL reads every
running job through a status index and matches them to the batch, instead of looking the batch's
ids up. When many jobs run while the statistics still say none (a worker whose outcomes piled
up), that is a loop over all of them for each outcome: one batch of successes took 28.8 s with
about 20,000 jobs running, which made the next batch larger still.

Behind a CASE the test is an expression without statistics, so the planner gives it its default
estimate (one row in two) and drives the statement from the batch through the primary key; the
status is then checked on the rows found. The plans are pinned by
``tests/db/test_guard_plans.py``.
"""

from __future__ import annotations

#: ``j.status = 'running'`` for a statement that names its jobs by a list of ids (the table is
#: ``django_jobs_job j``). A statement of one id keeps the plain test: the primary key or the
#: ``(status, id)`` index finds the one row either way.
STILL_RUNNING = "CASE j.status WHEN 'running' THEN true ELSE false END"
