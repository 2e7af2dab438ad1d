"""What a person does to jobs, and sees of them.

The admin's pages, registered by :mod:`~django_jobs.console.admin`: ``jobs`` (the list, built on
``listing``, and a job's page, shown through ``display``), ``job_actions`` (the confirmation of
retry, cancel, resolve), ``queues`` (the dashboard, drawn by ``dashboard``, and pausing a queue)
and ``schedules``; ``pages`` holds what they share.

The audited operations they share with ``manage.py jobs`` / ``jobsqueue`` and
``django_jobs.retry`` / ``cancel``: ``actions`` (retry, cancel, resolve) and ``pausing``, each
in the one audited transaction of ``audit``, each refusing a missing or unstorable who and why by
the one rule of ``reasons``. Every read they make in SQL is in :mod:`django_jobs.reads`.
"""
