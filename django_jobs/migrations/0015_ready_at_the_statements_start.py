"""A job written due at its statement's start is ready.

``available_at`` defaults to ``statement_timestamp()`` (Django's ``Now()``), and the trigger of
0013 compared it with ``now()``, the transaction's start: later in a transaction, or for any
statement sent with parameters (the extended protocol starts the statement after the
transaction), a job written with the default due time was taken for one scheduled for later. It
waited, not ready, until a claim promoted it: an UPDATE more per job, and a backlog written that
way drained at half speed until promoted. Comparing with the statement's start keeps a job due
at its write ready; one due later is still not.

Replacing the trigger is one short transaction: ``DROP TRIGGER`` takes an ACCESS EXCLUSIVE lock
on the job table for the time of two catalog changes (reads, claims and writes wait that moment;
docs/upgrading.md). Jobs written not ready before are promoted by the claims, as they were.
"""

from django.db import migrations

_TRIGGER = """
DROP TRIGGER django_jobs_keep_ready ON django_jobs_job;
CREATE TRIGGER django_jobs_keep_ready BEFORE INSERT ON django_jobs_job
FOR EACH ROW WHEN (NEW.status = 'pending' AND NEW.available_at > {start})
EXECUTE FUNCTION django_jobs_keep_ready();
"""


class Migration(migrations.Migration):
    dependencies = [
        ('django_jobs', '0014_drop_claim_indexes_by_priority'),
    ]

    operations = [
        migrations.RunSQL(
            _TRIGGER.format(start="statement_timestamp()"),
            _TRIGGER.format(start="now()"),
        ),
    ]
