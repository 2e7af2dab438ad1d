"""A user's settings, as docs/quickstart.md and docs/django-tasks.md write them: django_jobs
in INSTALLED_APPS, JobsBackend for Django's Tasks framework, and static files served from
what collectstatic gathered (the manifest storage refuses to render a page whose static file
was not found)."""

import os
import urllib.parse
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "django-jobs-smoke-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobs",
    # Django 5.2 has the Tasks framework from the backport (the wheel's "tasks" extra).
    *([] if django.VERSION >= (6, 0) else ["django_tasks"]),
    "smokeapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "smokesite.urls"
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

# The database the smoke created for this run, given as postgres://user@host:port/name.
_url = urllib.parse.urlsplit(os.environ["SMOKE_DATABASE_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username or "postgres",
        "PASSWORD": _url.password or "",
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
}

TASKS = {"default": {"BACKEND": "django_jobs.backend.JobsBackend"}}
