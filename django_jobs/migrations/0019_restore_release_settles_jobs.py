"""Releasing a restore hold settles the jobs it kept: the hold records how many (``settled``,
a nullable column: no rewrite of the table), and their events have a kind of their own (a
change of choices only, nothing in the database).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobs', '0018_restore_holds'),
    ]

    operations = [
        migrations.AddField(
            model_name='restorehold',
            name='settled',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='kind',
            field=models.CharField(choices=[('retry_scheduled', 'Retry scheduled'), ('failed', 'Failed'), ('skipped', 'Skipped'), ('cancelled', 'Cancelled'), ('released', 'Released by its worker'), ('recovered', 'Recovered by the reaper'), ('needs_review', 'Parked for review'), ('manual_retry', 'Retried by an operator'), ('cancel_requested', 'Cancellation requested'), ('resolved', 'Resolved by an operator'), ('reconciled', 'Reconciled: the effect had already happened'), ('restore_released', 'Released from a restore hold')], max_length=30),
        ),
    ]
