from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("webapp", "0019_notifications"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="review_approved_step",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="run",
            name="judge_down_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="judge_retry_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
