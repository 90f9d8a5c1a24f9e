from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webapp', '0002_review'),
    ]

    operations = [
        migrations.AddField(
            model_name='rescore',
            name='heartbeat_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
