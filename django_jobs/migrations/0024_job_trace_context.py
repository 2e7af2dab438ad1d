"""The trace context an enqueue stores with its job (``observe.tracing``).

A nullable column without a default: PostgreSQL adds it to the catalogue only, without
rewriting the table or holding its lock longer than that, and a job that is not traced stores
nothing in it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0023_queue_counts_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='trace_context',
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
