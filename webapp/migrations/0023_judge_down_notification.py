# A run parked for its judge's provider notifies (issue 49): one more NotifyEvent choice; no data changes.
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("webapp", "0022_retention_queue"),
    ]

    operations = [
        migrations.AlterField(
            model_name="notification",
            name="event",
            field=models.CharField(choices=[("awaiting_review", "A run awaits review"),
                                            ("paused_by_monitor", "A monitor paused a run"),
                                            ("over_budget", "A run spent its judge budget"),
                                            ("failed", "A run failed"), ("completed", "A run completed"),
                                            ("judge_down", "A run waits for its judge (provider down)")],
                                   max_length=24),
        ),
    ]
