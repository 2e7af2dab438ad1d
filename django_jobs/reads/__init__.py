"""Every read of the console, the metrics and the diagnosis that is raw SQL, each a named
statement with the index that serves it, each behind a named function that says what it returns.

- :mod:`~django_jobs.reads.clock`: the database's clock, by which every age is measured;
- :mod:`~django_jobs.reads.queues`: the per-queue figures (the dashboard's queue table and the
  metrics view's gauges: one set of numbers);
- :mod:`~django_jobs.reads.activity`: the dashboard's last hour (completions per minute, retry
  rate, processing times) and last day's failures, each read up to a cap;
- :mod:`~django_jobs.reads.dashboard`: the dashboard's SLA, retention and workers;
- :mod:`~django_jobs.reads.durable`: where a durable job sleeps or waits, what it recorded, and
  how many sleep and wait (the dashboard's and the metrics view's counts, each up to a cap);
- :mod:`~django_jobs.reads.bounded`: the transaction of the reads a cap bounds (JIT off);
- :mod:`~django_jobs.reads.findings`: what ``checkjobs`` and the health check look for;
- :mod:`~django_jobs.reads.estimates`: the planner's estimate of the job list's size;
- :mod:`~django_jobs.reads.replica`: where the console's pages and the metrics view read
  (``CONSOLE_DATABASE``, a streaming replica), and how far behind it is;
- :mod:`~django_jobs.reads.search`: what a term of the console's search box finds;
- :mod:`~django_jobs.reads.search_fields`: the payload fields job types declare searchable, and
  the state of the index each needs.

The console, the metrics view, the findings and the diagnosis run no SQL of their own
(``tests/unit/test_reads_layer.py`` holds them to it): they call these, or a named read of the
models' managers.

A read that does not hold up on a table of millions is a defect: ``tests/db/test_indexes.py``
and ``bench/admin_pages.py`` check the plans of these statements, and
``tests/admin/test_console_fuzz.py`` what the dashboard's and the metrics view's read.
"""
