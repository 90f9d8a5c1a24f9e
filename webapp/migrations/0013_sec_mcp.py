
from django.db import migrations, models


def stdio_to_catalogue(apps, schema_editor):
    """Issue 33: a stdio server names an entry of the deployment's catalogue; its typed command goes. The shipped
    mailbox becomes the catalogue's `mailbox`; any other stdio server names none until an editor chooses one (its
    page and its agents' launches say so)."""
    McpServer = apps.get_model("webapp", "McpServer")
    for server in McpServer.objects.filter(transport="stdio"):
        if "training.environments.mailbox_server" in (server.args or []):
            server.catalogue_entry = "mailbox"
            server.save(update_fields=["catalogue_entry"])


class Migration(migrations.Migration):

    dependencies = [
        ('webapp', '0012_use'),
    ]

    operations = [
        migrations.AddField(
            model_name='mcpserver',
            name='catalogue_entry',
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.RunPython(stdio_to_catalogue, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='mcpserver',
            name='args',
        ),
        migrations.RemoveField(
            model_name='mcpserver',
            name='command',
        ),
        migrations.RemoveField(
            model_name='mcpserver',
            name='env',
        ),
        migrations.AddField(
            model_name='mcpserver',
            name='test_error',
            field=models.TextField(blank=True),
        ),
        migrations.AddField(
            model_name='mcpserver',
            name='test_latency_s',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='mcpserver',
            name='test_requested_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='mcpserver',
            name='test_status',
            field=models.CharField(blank=True, choices=[('', 'not tested'), ('queued', 'queued'), ('running', 'testing'), ('ok', 'connected'), ('failed', 'failed')], default='', max_length=8),
        ),
        migrations.AlterField(
            model_name='mcpserver',
            name='transport',
            field=models.CharField(choices=[('stdio', "stdio: a server of this deployment's catalogue, run by the workers"), ('http', 'HTTP: a streamable-HTTP server at a URL')], default='http', max_length=8),
        ),
    ]
