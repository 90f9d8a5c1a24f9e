# Issue 11: one run per launch form (launch_token), agents versioned once a run used them.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webapp', '0002_review'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='agent',
            name='version',
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.AddField(
            model_name='run',
            name='agent_version',
            field=models.PositiveIntegerField(default=1, help_text='Agent.version at launch.'),
        ),
        migrations.AddField(
            model_name='run',
            name='launch_token',
            field=models.CharField(blank=True, default='', max_length=64),
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.UniqueConstraint(condition=models.Q(('launch_token', ''), _negated=True), fields=('project', 'launch_token'), name='run_launch_token_unique_in_project'),
        ),
    ]
