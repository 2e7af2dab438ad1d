"""Jobs in Sentry: what a handler reports is tagged with its job, and every failed attempt is
an event, the attempts of one job grouped in one issue. Imported by ShopConfig.ready()."""

import sentry_sdk
from django.dispatch import receiver

from django_jobs.signals import job_finished, job_started


@receiver(job_started, dispatch_uid="shop.error_tracking.tag_the_handlers_events")
def tag_the_handlers_events(sender, job_id, type, queue, attempt, **kwargs):
    # Sent on the thread that runs the handler, just before it: the errors the handler logs or
    # captures carry the job. (With --pool process, the handler runs in a child process.)
    scope = sentry_sdk.get_isolation_scope()
    scope.set_tag("job.id", str(job_id))
    scope.set_tag("job.type", type)
    scope.set_tag("job.queue", queue)
    scope.set_tag("job.attempt", str(attempt))


@receiver(job_finished, dispatch_uid="shop.error_tracking.report_failed_attempts")
def report_failed_attempts(sender, job_id, type, queue, status, attempt, error_code, error, **kwargs):
    if error_code is None or status in ("cancelled", "skipped"):
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("job.id", str(job_id))
        scope.set_tag("job.type", type)
        scope.set_tag("job.queue", queue)
        scope.set_tag("job.attempt", str(attempt))
        scope.set_tag("job.status", status)  # pending: a retry is scheduled
        scope.set_tag("job.error_code", error_code)
        # One issue per job: its retries are events of the same issue, not new issues.
        scope.fingerprint = ["django_jobs", type, str(job_id)]
        # The error as the job stores it: sanitized, secrets redacted.
        level = "warning" if status == "pending" else "error"
        sentry_sdk.capture_message(f"{type} attempt {attempt}: {error_code}: {error}", level=level)
