from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webapp', '0004_run_enqueued_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='rescore',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
