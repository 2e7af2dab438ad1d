"""Two new tables, empty: the database's identity as the workers last saw it (one row, written
by the first worker that looks) and the restore holds. Creating them takes no lock on the job
tables; going back drops them.
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0017_job_table_vacuumed_sooner'),
    ]

    operations = [
        migrations.CreateModel(
            name='DatabaseIdentity',
            fields=[
                ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('system_identifier', models.BigIntegerField()),
                ('database_oid', models.BigIntegerField()),
                ('timeline', models.PositiveIntegerField()),
                ('generation', models.PositiveBigIntegerField()),
                ('looked_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='django_jobs_identity_one_row')],
            },
        ),
        migrations.CreateModel(
            name='RestoreHold',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('kind', models.CharField(choices=[('recreated', 'Database re-created (a dump restored, or a copy)'), ('went_back', 'Database behind what a worker saw'), ('new_timeline', 'New timeline that no worker saw begin'), ('declared', 'Declared by an operator')], max_length=20)),
                ('evidence', models.TextField()),
                ('opened_by', models.CharField(max_length=200)),
                ('opened_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('released_at', models.DateTimeField(blank=True, null=True)),
                ('released_by', models.CharField(blank=True, max_length=150, null=True)),
                ('release_reason', models.TextField(blank=True, null=True)),
            ],
            options={
                'ordering': ('-id',),
                'permissions': (('release_restore_hold', 'Can declare and release restore holds'),),
                'constraints': [models.UniqueConstraint(models.Value(True), condition=models.Q(('released_at__isnull', True)), name='django_jobs_one_open_restore_hold'), models.CheckConstraint(condition=models.Q(('released_at__isnull', True), models.Q(('release_reason__isnull', False), ('released_by__isnull', False)), _connector='OR'), name='django_jobs_restore_release_says_who_and_why')],
            },
        ),
    ]
