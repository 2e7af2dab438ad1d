"""What a person does to jobs, and sees of them.

The admin's pages, registered by :mod:`~django_jobs.console.admin`: ``jobs`` (the list, built on
``listing``), ``job_page`` (a job's page, shown through ``display``), ``job_actions`` (the
confirmation of retry, cancel, resolve), ``bulk_pages`` (retry or cancel every job a filter
matches: ``job_filter`` says which, ``bulk`` starts the operation, ``bulk_runner`` is the job
that carries it out), ``queues`` (the dashboard, drawn by ``dashboard``, and pausing a queue)
and ``schedules``; ``pages`` holds what they share (among it, that a page that reads reads from
``CONSOLE_DATABASE``), ``seen`` what a confirmation page showed of each job, which its action
checks on the primary.

The audited operations they share with ``manage.py jobs`` / ``jobsqueue`` and
``django_jobs.retry`` / ``cancel``: ``actions`` (retry, cancel, resolve) and ``pausing``, each
in the one audited transaction of ``audit``, each refusing a missing or unstorable who and why by
the one rule of ``reasons``. Every read they make in SQL is in :mod:`django_jobs.reads`.

Every process that sets Django up registers the console with the admin, workers included, and
a worker never serves a page: the pages import the heaviest of what only they read (the
dashboard's figures, a job's diagnosis) where they are served, not at their own import.
"""
