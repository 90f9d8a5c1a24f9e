"""Checkpoints kept by a policy and a fair queue (issue 47): when a checkpoint was last served (the retention
policy keeps it), what the policy deleted after a run, and a project's queue priority."""
from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        # Both leaves present when it was written (it merges them).
        ("webapp", "0021_first_hour"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="served_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="checkpoints_pruned",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="project",
            name="queue_priority",
            field=models.SmallIntegerField(default=0),
        ),
    ]
