"""The process tests that prove each promise, run again behind PgBouncer in transaction mode
(this package's conftest: the workers and the test process go through the pooler, the workers
LISTEN directly). Each is the very test of its own module, imported: what it asserts directly,
it asserts through the pooler too.

One of each kind, chosen to keep CI within its budget: a worker killed mid-job and one frozen
past its lease (the claim's lock, the lease and the fenced writes, each a statement of its own
transaction on whichever server connection the pooler lends), a checkpoint resumed, a task of
Django's Tasks framework and its result, a schedule fired once per tick by three workers, a
pause and a resume heard by two workers, a job started milliseconds after its enqueue and one
found by polling, and the console's pages and audited actions. The restart of PostgreSQL behind
the pooler is in test_outage.py.
"""

from __future__ import annotations

import pytest

from tests.admin import test_console as console
from tests.admin.conftest import login, superuser
from tests.process import test_crashes as crashes
from tests.process import test_queue_pause as pause
from tests.process import test_schedules as schedules
from tests.process import test_tasks_crash as tasks
from tests.process import test_wakeup as wakeup

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# The fixtures the imported tests ask for, from their own modules.
fleet = schedules.fleet
listening_worker = wakeup.listening_worker
two_workers = pause.two_workers
workers = tasks.workers
__all__ = ["login", "superuser"]

# The lifecycle, a crash and a fenced zombie.
test_a_killed_workers_job_is_recovered_and_completed_by_another = (
    crashes.test_5_job_of_a_killed_worker_is_recovered_and_completed_by_another
)
test_a_frozen_worker_cannot_overwrite_the_job_after_it_was_handed_over = (
    crashes.test_frozen_worker_cannot_overwrite_the_job_after_it_was_handed_over
)
test_a_checkpointed_job_resumes_after_kill_9 = crashes.test_checkpointed_job_resumes_after_kill_9

# Django's Tasks: a task recovered after a SIGKILL, its result read.
test_a_killed_task_is_recovered_and_its_result_reads_successful = (
    tasks.test_a_task_whose_worker_is_killed_mid_run_is_recovered_and_completes
)

# Schedules: the scheduler's claim of a tick and its write, once per tick across workers.
test_three_workers_fire_each_tick_exactly_once = schedules.test_three_workers_fire_each_tick_exactly_once

# Pause and resume: heard on the direct LISTEN connection within half a second.
test_pause_and_resume_reach_both_workers = (
    pause.test_pause_and_resume_reach_both_workers_and_running_jobs_finish
)

# Wake-up: milliseconds with LISTEN_DATABASE; within POLL_INTERVAL with NOTIFY off.
test_an_idle_worker_starts_a_new_job_within_milliseconds = (
    wakeup.test_an_idle_worker_starts_a_new_job_within_milliseconds
)
test_with_notify_off_a_worker_polls_every_poll_interval = (
    wakeup.test_with_notify_off_a_worker_polls_every_poll_interval
)

# The console: pages, audited actions, a bulk one.
test_the_console_retries_a_job_and_records_who = console.test_manual_retry_records_who_and_keeps_the_history
test_the_console_cancels_a_running_job_by_request = (
    console.test_cancel_of_a_running_job_is_a_request_and_audited
)
test_the_console_retries_in_bulk_after_confirming = console.test_bulk_retry_goes_through_the_confirmation_page
test_the_job_page_shows_payload_error_and_history = console.test_detail_shows_payload_error_and_history
test_the_dashboard_reads_a_fixed_number_of_statements = console.test_dashboard_queries_are_a_fixed_number
