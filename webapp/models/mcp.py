"""MCP servers a project's agents may use as their tools (the engine's `mcp` environment).

A stdio server is a command the workers run: adding or changing one is running code on the workers, so only the
project's owner (or a site administrator) may (webapp/services/mcp_servers.py). HTTP header values may hold
secrets: they are stored encrypted (like judge keys) and never rendered back; only their names are kept plain.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.models.projects import Project


class McpServer(models.Model):
    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio: a command the workers run"
        HTTP = "http", "HTTP: a streamable-HTTP server at a URL"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=200)
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    url = models.CharField(max_length=500, blank=True)
    header_names = models.JSONField(default=list, blank=True)  # shown; the values are in headers_encrypted only
    headers_encrypted = models.TextField(blank=True, editable=False)  # Fernet of a JSON object {name: value}
    per_call_timeout_s = models.FloatField(default=30.0)
    max_result_chars = models.PositiveIntegerField(default=4000)
    max_concurrent_calls = models.PositiveIntegerField(default=8)
    # The tools the last successful "test connection" listed (OpenAI `tools` format), for the detail page and
    # the scenario generator; a run lists them again itself at launch.
    tools = models.JSONField(default=list, blank=True)
    tools_listed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="mcp_server_name_unique")]

    def __str__(self) -> str:
        return self.name

    @property
    def where(self) -> str:
        """The command line or URL, as people read it (no header values)."""
        if self.transport == self.Transport.STDIO:
            return " ".join([self.command, *self.args])
        return self.url
