"""Settings of the test and demo project. Every value can be overridden from the environment."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = env("SECRET_KEY", default="django-jobs-testproject-not-secret")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])

# Django's Tasks framework: django.tasks from Django 6.0, the django-tasks backport before.
_TASKS_BACKPORT = [] if django.VERSION >= (6, 0) else ["django_tasks"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobs",
    *_TASKS_BACKPORT,
    "testproject.demo",
    "testproject.testjobs",
    "testproject.shop",  # the example app of docs/quickstart.md; the docs' snippets use it
    "health_check",  # the health check endpoint of docs/operations/diagnosis.md, with django_jobs' plugin
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/django_jobs"),
}
# Separate test runs on one server (two checkouts, say) can use separate test databases.
DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME", default=None)}
# A replica for the console to read from (DJANGO_JOBS["CONSOLE_DATABASE"]): a streaming standby
# of DATABASE_URL given as CONSOLE_DATABASE_URL, which the console then reads; else a second
# connection to the same database (a test mirror of default), which tests name to check where
# the console's reads go.
if env("CONSOLE_DATABASE_URL", default=None):
    DATABASES["replica"] = env.db("CONSOLE_DATABASE_URL")
else:
    DATABASES["replica"] = copy.deepcopy(DATABASES["default"])
DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
# The job tables' queries go to DJANGO_JOBS["DATABASE"], whichever database that is.
DATABASE_ROUTERS = ["django_jobs.routers.JobsRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

# Every duration can come from the environment, so tests can run workers with sub-second leases.
DJANGO_JOBS = {
    key: env.float(f"DJANGO_JOBS_{key}", default=default)
    for key, default in {
        "POLL_INTERVAL": 0.2,
        "HEARTBEAT_INTERVAL": 10.0,
        "LEASE_TIMEOUT": 60.0,
        "REAPER_INTERVAL": 30.0,
    }.items()
}

if django.VERSION >= (6, 1):
    # Email is configured per mailer from Django 6.1; the tests swap each for an in-memory one.
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.console.EmailBackend"}}

# The task queues of testproject/testjobs/tasks.py; tests run them on django_jobs.
TASKS = {
    "default": {
        "BACKEND": "django_jobs.backend.JobsBackend",
        "QUEUES": ["default", "emails", "reports"],
        "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF_BASE": 0.01, "BACKOFF_CAP": 0.05},
    }
}

# A project whose TASKS names JobsBackend but whose INSTALLED_APPS lacks "django_jobs" (the
# system checks' process test): Django's own apps only, and URLs that import none of the jobs.
if env.bool("DJANGO_JOBS_NOT_INSTALLED", default=False):
    INSTALLED_APPS = [
        *(app for app in INSTALLED_APPS if app.startswith("django") and app != "django_jobs"),
        "testproject.bare",
    ]
    ROOT_URLCONF = "testproject.bare.urls"

# How long completed jobs are kept, for the retention soak (bench/churn_soak.py).
if env("DJANGO_JOBS_COMPLETED_RETENTION", default=None) is not None:
    DJANGO_JOBS["RETENTION"] = {"completed": env.float("DJANGO_JOBS_COMPLETED_RETENTION")}

# The prefetch tests widen the buffer's patience (10 × PREFETCH_SECONDS) past a short lease.
if env("DJANGO_JOBS_PREFETCH_SECONDS", default=None) is not None:
    DJANGO_JOBS["PREFETCH_SECONDS"] = env.float("DJANGO_JOBS_PREFETCH_SECONDS")

# The project's declared queues, comma-separated (the tests of runjobs --queue against them).
if env("DJANGO_JOBS_QUEUES", default=None):
    DJANGO_JOBS["QUEUES"] = env.list("DJANGO_JOBS_QUEUES")

if env("DJANGO_JOBS_NOTIFY", default=None) is not None:
    DJANGO_JOBS["NOTIFY"] = env.bool("DJANGO_JOBS_NOTIFY")

# The bearer token of the metrics view and of a worker's metrics port (the metrics tests).
if env("DJANGO_JOBS_METRICS_TOKEN", default=None):
    DJANGO_JOBS["METRICS_TOKEN"] = env("DJANGO_JOBS_METRICS_TOKEN")

# A fast schedule for the scheduling tests: DJANGO_JOBS_TICK_EVERY seconds, optionally with a
# misfire grace (DJANGO_JOBS_TICK_GRACE), a job that outlives its tick (DJANGO_JOBS_TICK_SLEEP) and
# an overlap policy (DJANGO_JOBS_TICK_ON_RUNNING).
if env("DJANGO_JOBS_TICK_EVERY", default=None) is not None:
    DJANGO_JOBS["SCHEDULES"] = {
        "test-tick": {
            "type": "test.ticked",
            "every": env.float("DJANGO_JOBS_TICK_EVERY"),
            "misfire_grace": env.float("DJANGO_JOBS_TICK_GRACE", default=None),
            "payload": {"sleep": env.float("DJANGO_JOBS_TICK_SLEEP", default=0)},
            "on_running": env("DJANGO_JOBS_TICK_ON_RUNNING", default="skip"),
        }
    }

if env("CONSOLE_DATABASE_URL", default=None):
    DJANGO_JOBS["CONSOLE_DATABASE"] = "replica"

# The workers' LISTEN connection to PostgreSQL directly while DATABASE_URL goes through a pooler
# in transaction mode (DJANGO_JOBS["LISTEN_DATABASE"]; the PgBouncer tests use it).
if env("LISTEN_DATABASE_URL", default=None):
    DATABASES["listen"] = env.db("LISTEN_DATABASE_URL")
    DATABASES["listen"]["TEST"] = {"MIRROR": "default"}
    DJANGO_JOBS["LISTEN_DATABASE"] = "listen"

# Jobs in a database of their own (the system checks' tests use it).
if env("JOBS_DATABASE_URL", default=None):
    DATABASES["jobs"] = env.db("JOBS_DATABASE_URL")
    DJANGO_JOBS["DATABASE"] = "jobs"

# No LOGGING by default: runjobs then speaks through its own handler, as in a new project. The
# crash tests set DJANGO_JOBS_LOG_LEVEL to read their workers' logs at a level of their choice.
if env("DJANGO_JOBS_LOG_LEVEL", default=None):
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "loggers": {"django_jobs": {"handlers": ["console"], "level": env("DJANGO_JOBS_LOG_LEVEL")}},
    }

# A whole LOGGING dict as JSON text: the structured-log tests give a real worker the one
# docs/workers.md shows. It wins over DJANGO_JOBS_LOG_LEVEL.
if env("DJANGO_JOBS_LOGGING", default=None):
    LOGGING = json.loads(env("DJANGO_JOBS_LOGGING"))

# OpenTelemetry in a worker process of the tracing tests: each span to this file, as it ends
# (testproject/span_file.py; docs/operations/tracing.md sets a provider the same way).
if env("TRACE_SPANS_FILE", default=None):
    from testproject.span_file import trace_to

    trace_to(env("TRACE_SPANS_FILE"))

# OpenTelemetry metrics in a process of the gauge tests: each export to this file
# (testproject/metric_file.py).
if env("OTEL_METRICS_FILE", default=None):
    from testproject.metric_file import meter_to

    meter_to(env("OTEL_METRICS_FILE"))

# Sentry in a worker process of the error-tracking tests (testproject/sentry_file.py): events to
# this file, and the example shop's receivers connected (testproject/shop/apps.py).
SENTRY_EVENTS_FILE = env("SENTRY_EVENTS_FILE", default=None)
if SENTRY_EVENTS_FILE:
    from testproject.sentry_file import report_to

    report_to(SENTRY_EVENTS_FILE)
