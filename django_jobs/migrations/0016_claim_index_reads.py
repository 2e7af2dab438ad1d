"""How many dead entries of the claim indexes a claim stepped over (see transitions.positions).

``django_jobs_claim_index_reads()`` is the number of entries the claim indexes returned to
this transaction's scans, less the rows those entries led to: an entry whose row version no
snapshot of this transaction can see (the job was claimed since, and vacuum has not removed the
entry yet) counts one. The claim reads it before and after its scans. As a function, the claim
statement stays short enough for psycopg's cache of parsed statements (4 KiB).

Creating a function takes no lock on the job table.
"""

from django.db import migrations

_FUNCTION = """
CREATE FUNCTION django_jobs_claim_index_reads() RETURNS bigint LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT pg_stat_get_xact_tuples_returned('django_jobs_ready'::regclass)
         - pg_stat_get_xact_tuples_fetched('django_jobs_ready'::regclass)
         + pg_stat_get_xact_tuples_returned('django_jobs_ready_queue'::regclass)
         - pg_stat_get_xact_tuples_fetched('django_jobs_ready_queue'::regclass)
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ('django_jobs', '0015_ready_at_the_statements_start'),
    ]

    operations = [
        migrations.RunSQL(_FUNCTION, "DROP FUNCTION django_jobs_claim_index_reads();"),
    ]
