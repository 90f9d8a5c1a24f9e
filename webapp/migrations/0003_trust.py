# Issue 11: one run per launch form (launch_token); agents and scenarios versioned once a run used them.

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webapp', '0002_review'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='scenario',
            name='scenario_id_unique_in_set',
        ),
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
        migrations.AddField(
            model_name='scenario',
            name='retired',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='scenario',
            name='version',
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.UniqueConstraint(condition=models.Q(('launch_token', ''), _negated=True), fields=('project', 'launch_token'), name='run_launch_token_unique_in_project'),
        ),
        migrations.AddConstraint(
            model_name='scenario',
            constraint=models.UniqueConstraint(condition=models.Q(('retired', False)), fields=('scenario_set', 'external_id'), name='scenario_id_unique_in_set'),
        ),
    ]
