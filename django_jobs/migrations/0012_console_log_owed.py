"""Admin log entries owed by console actions, when the admin's log is on another database."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0011_liveworker_job_types'),
    ]

    operations = [
        migrations.CreateModel(
            name='PendingLogEntry',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('action_time', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('user_id', models.CharField(max_length=255)),
                ('content_type_id', models.IntegerField()),
                ('object_id', models.TextField()),
                ('object_repr', models.CharField(max_length=200)),
                ('action_flag', models.PositiveSmallIntegerField()),
                ('change_message', models.TextField()),
            ],
            options={
                'ordering': ('id',),
            },
        ),
    ]
