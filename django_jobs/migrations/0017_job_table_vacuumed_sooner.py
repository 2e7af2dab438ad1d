"""Autovacuum visits the job table as a queue table needs, with PostgreSQL's stock settings.

Every job leaves three dead row versions in the job table (its claim, its outcome, its pruning
by retention) and as many dead entries in each index. PostgreSQL's stock autovacuum waits until
20 % of a table is dead (``autovacuum_vacuum_scale_factor = 0.2``) and then works at a throttled
pace (``autovacuum_vacuum_cost_delay = 2ms``): right for a table of business rows, too late and
too slow for a queue whose rows all die within seconds. Meanwhile the table and its indexes grow,
and every claim reads more pages. This sets, on the job table only:

* ``autovacuum_vacuum_scale_factor = 0.01``: vacuum once 1 % of the rows are dead. A table that
  keeps a week of finished jobs (the default retention) holds millions of rows, and 20 % of them
  is hours of dead row versions;
* ``autovacuum_vacuum_cost_delay = 0``: no throttling while it vacuums this table. Every claim
  reads its indexes, and the sooner the dead entries go, the fewer a claim steps over; the price
  is the I/O of a visit in one burst, once a naptime (a minute by default) at most.

``bench/churn_soak.py --own-cluster`` measures it on a stock cluster (bench/README.md).

Storage parameters change the catalog only: no rewrite, and the lock they take (SHARE UPDATE
EXCLUSIVE) lets enqueues, claims and outcomes go on; it waits for a running vacuum or ANALYZE of
the table, which autovacuum cancels for it after ``deadlock_timeout`` (unless it is a vacuum
against wraparound: then the migration gives up after its ``lock_timeout`` of 10 s, and is run
again). Going back (``migrate django_jobs 0016``) resets them to the server's settings. An
operator's own values, set later with ``ALTER TABLE … SET``, win until the next migration that
touches them; docs/scaling.md says how to see and change them.
"""

from django.db import migrations

PARAMETERS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_cost_delay": "0",
}

_SET = "ALTER TABLE django_jobs_job SET ({});".format(
    ", ".join(f"{name} = {value}" for name, value in PARAMETERS.items())
)
_RESET = "ALTER TABLE django_jobs_job RESET ({});".format(", ".join(PARAMETERS))


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobs", "0016_claim_index_reads"),
    ]

    operations = [
        # A lock held for longer than this is a migration to run again, not an outage.
        migrations.RunSQL("SET LOCAL lock_timeout = '10s';", migrations.RunSQL.noop),
        migrations.RunSQL(_SET, _RESET),
    ]
