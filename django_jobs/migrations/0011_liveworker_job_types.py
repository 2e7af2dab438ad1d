"""Workers record the job types they run, with the newest payload version each reads, so that
a diagnosis can say that no live worker knows a pending job's type or version."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0010_schedule_ticks'),
    ]

    operations = [
        migrations.AddField(
            model_name='liveworker',
            name='job_types',
            field=models.JSONField(blank=True, null=True),
        ),
    ]
