"""What a person does to jobs, and sees of them: the admin console's pages (jobs, queues,
schedules, dashboard), and the audited actions (retry, cancel, resolve, pause) it shares with
``manage.py jobs`` / ``jobsqueue`` and ``django_jobs.retry`` / ``cancel``."""
