"""Settings: one dict, ``DJANGO_JOBS = {...}``, read lazily so ``override_settings`` works.

Every key, its default and its meaning. Durations are seconds; floats are allowed.

``DATABASE`` ("default")
    Alias of the database that holds the job tables. Another alias needs
    ``django_jobs.routers.JobsRouter`` in ``DATABASE_ROUTERS`` (check ``django_jobs.E050``); when
    it is not the alias your business writes use, ``enqueue()`` is no longer atomic with them
    (check ``django_jobs.W001``).
``NOTIFY`` (True)
    Workers LISTEN for new jobs and start them within milliseconds. False: polling only (every
    ``POLL_INTERVAL``), for PgBouncer in transaction mode, which cannot hold a LISTEN.
``POLL_INTERVAL`` (1.0)
    How often a worker looks for jobs when nothing wakes it. With ``NOTIFY = False``, or while
    its listening connection is down, it claims; an idle listening worker reads instead when
    the next job it could claim is due and which queues are paused (one indexed read), so a job
    it never heard of is late by at most this long, and a scheduled one starts when due.
``BATCH_SIZE`` (100)
    Most jobs one claim statement takes. A worker claims beyond its free execution slots only
    while jobs are short (see ``PREFETCH_SECONDS``), so long jobs are never hoarded; with short
    jobs it holds up to two batches, claiming the next while it runs one.
``PREFETCH_SECONDS`` (0.05)
    How much work, in observed run time, a worker may hold claimed but not yet started.
``OUTCOME_FLUSH_INTERVAL`` (0.01)
    Finished executions are written in batches at least this often.
``HEARTBEAT_INTERVAL`` (10.0)
    How often a worker extends the lease of the jobs it holds.
``LEASE_TIMEOUT`` (60.0)
    How long an execution owns its job without a sign of life (job types may set their own).
    Once its lease expires, the reaper takes the job back: its worker is presumed lost.
``PROGRESS_INTERVAL`` (1.0)
    ``ctx.progress()`` writes at most this often (and always when the work is done).
``MAX_CHECKPOINT_BYTES`` (65536)
    Largest checkpoint ``ctx.save_checkpoint()`` accepts, measured as its UTF-8 JSON encoding.
``REAPER_INTERVAL`` (30.0)
    How often the reaper looks for stale running jobs and prunes old finished ones.
``MAX_PAYLOAD_BYTES`` (262144)
    Largest accepted payload, measured as its UTF-8 JSON encoding.
``MAX_RESULT_BYTES`` (65536)
    Largest return value stored for a handler or task, measured as its UTF-8 JSON encoding.
    A larger one, or one that is not plain JSON, ends the job ``failed`` (``RESULT_INVALID``).
``DEFAULT_QUEUE`` ("default"), ``DEFAULT_MAX_ATTEMPTS`` (5)
    Used when neither the job type nor ``enqueue()`` says otherwise.
``QUEUES`` (None)
    The queue names the project uses, e.g. ``["default", "emails", "reports"]``. Declared,
    ``enqueue()`` refuses any other with ``UnknownQueue`` and the closest declared name (a typo
    would otherwise make a queue no worker serves), and checks ``E070`` … ``E073`` hold job
    types, ``DEFAULT_QUEUE``, ``SCHEDULES`` and the Tasks backends' ``QUEUES`` to it. None:
    any valid queue name is accepted.
``BACKOFF_BASE`` (2.0), ``BACKOFF_CAP`` (3600.0), ``BACKOFF_JITTER`` (0.25)
    Default retry policy: ``base × 2^(attempt-1)``, capped, minus up to ``jitter`` of it.
``MAX_ERROR_CHARS`` (8000)
    Longest sanitized error text stored in ``Job.last_error`` and ``JobEvent.error``.
``SENSITIVE_PAYLOAD_KEYS`` (passwords, secrets, tokens, authorization, API and private keys…)
    Regular expressions, searched case-insensitively in every key of a payload, checkpoint or
    event detail: the values of matching keys are masked in the console for people without the
    ``view_sensitive_payload`` permission. Job types add exact key names with ``sensitive=``.
``SCHEDULES`` ({})
    Periodic jobs declared in settings: ``{"name": {"type": "reports.nightly", "cron": "0 3 * *
    *", "tz": "Europe/Moscow"}}``. Each entry has ``type`` and either ``cron`` or ``every``
    (seconds), and may set ``tz`` ("UTC"), ``payload`` ({}), ``queue``, ``priority``,
    ``misfire_grace`` (None) and ``on_running`` ("skip"). See docs/scheduling.md.
``SCHEDULE_TICK_RETENTION`` (30 days)
    How long the record of each schedule tick is kept; the latest tick of each schedule is
    always kept, since it is where the schedule resumes.
``CHECK_OLDEST_DUE_WARNING`` (300.0), ``CHECK_OLDEST_DUE_CRITICAL`` (1800.0)
    ``checkjobs`` and the health check report a queue whose oldest due job has waited longer
    than these, as a warning and as critical (the warning must be the shorter).
``CHECK_STALE_REAPER_INTERVALS`` (3.0)
    A running job whose lease expired is a warning; one expired more than this many
    ``REAPER_INTERVAL`` ago is critical: no reaper is running.
``METRICS_TOKEN`` (None)
    The bearer token a Prometheus scrape of the ``django_jobs.urls`` metrics view, or of a
    worker's ``runjobs --metrics-port``, presents (``Authorization: Bearer <token>``), compared
    in constant time. Without it, only a signed in staff user may read the view (an anonymous
    scrape is refused either way), and a worker's port serves anyone who reaches it (it listens
    on 127.0.0.1 unless told otherwise). A credential:
    never logged (``CREDENTIAL_SETTINGS``).
``METRICS_MAX_LABEL_VALUES`` (100)
    Most distinct values each label of a worker's metrics holds (``type``, ``queue``, ``code``,
    ``status``); later values are counted under ``other``. Error codes and queue names are
    chosen by handlers and callers: one that held a job's id would make a series per job.
``LIVENESS_STALL_LIMIT`` (None: 3 × ``HEARTBEAT_INTERVAL``, at least 30)
    A worker whose claim loop or heartbeat thread has not turned for this long is not live.
``LIVENESS_OUTAGE_LIMIT`` (None: 2 × ``LEASE_TIMEOUT``, at least 60)
    A worker that could not reach the database for this long is not live (it is not ready
    from the first failure).
``LIVENESS_STUCK_LIMIT`` (None: ``HEARTBEAT_INTERVAL``, at least 5)
    An execution still running this long past its deadline counts as stuck (a thread the pool
    replaced counts at once); a worker with as many stuck executions as slots is not live.
``CONNECT_TIMEOUT`` (5.0)
    A worker process's connection attempt gives up after this long (libpq ``connect_timeout``,
    whole seconds, at least 2) and is retried, instead of waiting out the kernel's SYN retries.
``TCP_KEEPALIVES_IDLE`` (5.0), ``TCP_KEEPALIVES_INTERVAL`` (2.0), ``TCP_KEEPALIVES_COUNT`` (3)
    A worker process's connections probe a silent peer after ``IDLE`` seconds, every
    ``INTERVAL``, and give it up after ``COUNT`` unanswered probes (libpq ``keepalives_*``).
``TCP_USER_TIMEOUT`` (10.0)
    A worker process's connection whose sent data stays unacknowledged this long is closed
    (libpq ``tcp_user_timeout``): a statement sent into a network cut fails within seconds.
``STATEMENT_TIMEOUT`` (30.0)
    Longest run of the worker's own statements (claim, heartbeat, outcomes, reaper, scheduler);
    never applied to the connections handlers use. ``None`` for PgBouncer in transaction mode.
    For each of these five, ``None`` leaves libpq's and the kernel's default, and a value in
    ``DATABASES[...]["OPTIONS"]`` wins (see django_jobs/runtime/connectivity.py).
``RETENTION`` ({"completed": 7 days, "skipped": 7 days, "cancelled": 30 days, "failed": None})
    How long finished jobs are kept, per status; ``None`` keeps them forever.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

DAY = 24 * 3600.0

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "NOTIFY": True,
    "POLL_INTERVAL": 1.0,
    "BATCH_SIZE": 100,
    "PREFETCH_SECONDS": 0.05,
    "OUTCOME_FLUSH_INTERVAL": 0.01,
    "HEARTBEAT_INTERVAL": 10.0,
    "LEASE_TIMEOUT": 60.0,
    "PROGRESS_INTERVAL": 1.0,
    "MAX_CHECKPOINT_BYTES": 64 * 1024,
    "REAPER_INTERVAL": 30.0,
    "MAX_PAYLOAD_BYTES": 256 * 1024,
    "MAX_RESULT_BYTES": 64 * 1024,
    "DEFAULT_QUEUE": "default",
    "QUEUES": None,
    "DEFAULT_MAX_ATTEMPTS": 5,
    "BACKOFF_BASE": 2.0,
    "BACKOFF_CAP": 3600.0,
    "BACKOFF_JITTER": 0.25,
    "MAX_ERROR_CHARS": 8000,
    "SENSITIVE_PAYLOAD_KEYS": (
        r"passw",
        r"pwd",
        r"secret",
        r"token",
        r"authori[sz]ation",
        r"api[-_]?key",
        r"private[-_]?key",
        r"credential",
        r"cookie",
        r"signature",
    ),
    "SCHEDULES": {},
    "SCHEDULE_TICK_RETENTION": 30 * DAY,
    "CHECK_OLDEST_DUE_WARNING": 300.0,
    "CHECK_OLDEST_DUE_CRITICAL": 1800.0,
    "CHECK_STALE_REAPER_INTERVALS": 3.0,
    "METRICS_TOKEN": None,
    "METRICS_MAX_LABEL_VALUES": 100,
    "LIVENESS_STALL_LIMIT": None,
    "LIVENESS_OUTAGE_LIMIT": None,
    "LIVENESS_STUCK_LIMIT": None,
    "CONNECT_TIMEOUT": 5.0,
    "TCP_KEEPALIVES_IDLE": 5.0,
    "TCP_KEEPALIVES_INTERVAL": 2.0,
    "TCP_KEEPALIVES_COUNT": 3,
    "TCP_USER_TIMEOUT": 10.0,
    "STATEMENT_TIMEOUT": 30.0,
    "RETENTION": {"completed": 7 * DAY, "skipped": 7 * DAY, "cancelled": 30 * DAY, "failed": None},
}

#: Settings whose values are credentials: the worker's start-up log, and anything else that
#: lists the settings, names them without their values.
CREDENTIAL_SETTINGS = frozenset({"METRICS_TOKEN"})


class Settings:
    """Typed, lazy view of ``settings.DJANGO_JOBS`` with the defaults above filled in."""

    def _get(self, name: str) -> Any:
        user = getattr(settings, "DJANGO_JOBS", {})
        if not isinstance(user, dict):  # check E001 reports it; until then, every default holds
            return DEFAULTS[name]
        return user.get(name, DEFAULTS[name])

    @property
    def DATABASE(self) -> str:
        return str(self._get("DATABASE"))

    @property
    def NOTIFY(self) -> bool:
        return bool(self._get("NOTIFY"))

    @property
    def SCHEDULES(self) -> dict[str, Any]:
        return dict(self._get("SCHEDULES"))

    @property
    def SCHEDULE_TICK_RETENTION(self) -> float:
        return float(self._get("SCHEDULE_TICK_RETENTION"))

    @property
    def POLL_INTERVAL(self) -> float:
        return float(self._get("POLL_INTERVAL"))

    @property
    def BATCH_SIZE(self) -> int:
        return int(self._get("BATCH_SIZE"))

    @property
    def PREFETCH_SECONDS(self) -> float:
        return float(self._get("PREFETCH_SECONDS"))

    @property
    def OUTCOME_FLUSH_INTERVAL(self) -> float:
        return float(self._get("OUTCOME_FLUSH_INTERVAL"))

    @property
    def HEARTBEAT_INTERVAL(self) -> float:
        return float(self._get("HEARTBEAT_INTERVAL"))

    @property
    def LEASE_TIMEOUT(self) -> float:
        return float(self._get("LEASE_TIMEOUT"))

    @property
    def PROGRESS_INTERVAL(self) -> float:
        return float(self._get("PROGRESS_INTERVAL"))

    @property
    def MAX_CHECKPOINT_BYTES(self) -> int:
        return int(self._get("MAX_CHECKPOINT_BYTES"))

    @property
    def REAPER_INTERVAL(self) -> float:
        return float(self._get("REAPER_INTERVAL"))

    @property
    def MAX_PAYLOAD_BYTES(self) -> int:
        return int(self._get("MAX_PAYLOAD_BYTES"))

    @property
    def MAX_RESULT_BYTES(self) -> int:
        return int(self._get("MAX_RESULT_BYTES"))

    @property
    def DEFAULT_QUEUE(self) -> str:
        return str(self._get("DEFAULT_QUEUE"))

    @property
    def QUEUES(self) -> frozenset[str] | None:
        """The declared queue names; None when the project declares none (any name goes)."""
        declared = self._get("QUEUES")
        return None if declared is None else frozenset(declared)

    @property
    def DEFAULT_MAX_ATTEMPTS(self) -> int:
        return int(self._get("DEFAULT_MAX_ATTEMPTS"))

    @property
    def BACKOFF_BASE(self) -> float:
        return float(self._get("BACKOFF_BASE"))

    @property
    def BACKOFF_CAP(self) -> float:
        return float(self._get("BACKOFF_CAP"))

    @property
    def BACKOFF_JITTER(self) -> float:
        return float(self._get("BACKOFF_JITTER"))

    @property
    def MAX_ERROR_CHARS(self) -> int:
        return int(self._get("MAX_ERROR_CHARS"))

    @property
    def SENSITIVE_PAYLOAD_KEYS(self) -> tuple[str, ...]:
        return tuple(self._get("SENSITIVE_PAYLOAD_KEYS"))

    @property
    def CHECK_OLDEST_DUE_WARNING(self) -> float:
        return float(self._get("CHECK_OLDEST_DUE_WARNING"))

    @property
    def CHECK_OLDEST_DUE_CRITICAL(self) -> float:
        return float(self._get("CHECK_OLDEST_DUE_CRITICAL"))

    @property
    def CHECK_STALE_REAPER_INTERVALS(self) -> float:
        return float(self._get("CHECK_STALE_REAPER_INTERVALS"))

    @property
    def METRICS_TOKEN(self) -> str | None:
        token = self._get("METRICS_TOKEN")
        return None if token is None else str(token)

    @property
    def METRICS_MAX_LABEL_VALUES(self) -> int:
        return int(self._get("METRICS_MAX_LABEL_VALUES"))

    @property
    def LIVENESS_STALL_LIMIT(self) -> float:
        return self._derived("LIVENESS_STALL_LIMIT", max(30.0, 3 * self.HEARTBEAT_INTERVAL))

    @property
    def LIVENESS_OUTAGE_LIMIT(self) -> float:
        return self._derived("LIVENESS_OUTAGE_LIMIT", max(60.0, 2 * self.LEASE_TIMEOUT))

    @property
    def LIVENESS_STUCK_LIMIT(self) -> float:
        return self._derived("LIVENESS_STUCK_LIMIT", max(5.0, self.HEARTBEAT_INTERVAL))

    @property
    def CONNECT_TIMEOUT(self) -> float | None:
        return self._optional("CONNECT_TIMEOUT")

    @property
    def TCP_KEEPALIVES_IDLE(self) -> float | None:
        return self._optional("TCP_KEEPALIVES_IDLE")

    @property
    def TCP_KEEPALIVES_INTERVAL(self) -> float | None:
        return self._optional("TCP_KEEPALIVES_INTERVAL")

    @property
    def TCP_KEEPALIVES_COUNT(self) -> int | None:
        value = self._get("TCP_KEEPALIVES_COUNT")
        return None if value is None else int(value)

    @property
    def TCP_USER_TIMEOUT(self) -> float | None:
        return self._optional("TCP_USER_TIMEOUT")

    @property
    def STATEMENT_TIMEOUT(self) -> float | None:
        return self._optional("STATEMENT_TIMEOUT")

    def _optional(self, name: str) -> float | None:
        """A duration that ``None`` turns off."""
        value = self._get(name)
        return None if value is None else float(value)

    def _derived(self, name: str, default: float) -> float:
        """A limit that defaults to a value derived from other settings."""
        value = self._get(name)
        return default if value is None else float(value)

    @property
    def RETENTION(self) -> dict[str, float | None]:
        merged: dict[str, float | None] = dict(DEFAULTS["RETENTION"])
        merged.update(self._get("RETENTION"))
        return merged


jobs_settings = Settings()
