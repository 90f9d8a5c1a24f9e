"""An SFT run needs no scenario set (issue 48, item 4): it trains on a dataset version, and a scenario set only
adds the held-out win rate. A GRPO run still names one (the launch refuses it without)."""
from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("webapp", "0020_parking"),
    ]

    operations = [
        migrations.AlterField(
            model_name="run",
            name="scenario_set",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                                    related_name="runs", to="webapp.scenarioset"),
        ),
    ]
