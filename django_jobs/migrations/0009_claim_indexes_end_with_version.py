"""The claim indexes end with ``version``: the claim's ``version <= newest`` is then checked on
the index entries, and a worker passes over a backlog of payloads newer than it reads (a rolling
deploy) without reading those rows.

Both indexes are partial on pending jobs, so rebuilding them reads the pending rows only.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0008_external_call_marks'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='job',
            name='django_jobs_claim_queue',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='django_jobs_claim_any',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('queue'), models.OrderBy(models.F('priority'), descending=True), models.F('available_at'), models.F('id'), models.F('version'), condition=models.Q(('status', 'pending')), name='django_jobs_claim_queue'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.OrderBy(models.F('priority'), descending=True), models.F('available_at'), models.F('id'), models.F('version'), condition=models.Q(('status', 'pending')), name='django_jobs_claim_any'),
        ),
    ]
