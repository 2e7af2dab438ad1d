"""The smallest project a worker runs in: django_jobs, the contrib apps a new Django project
has, and one no-op job type (bench/rss.py measures a worker's memory on it)."""
