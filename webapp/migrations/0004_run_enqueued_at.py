from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("webapp", "0003_trust")]

    operations = [
        migrations.AddField(model_name="run", name="enqueued_at", field=models.DateTimeField(blank=True, null=True)),
    ]
