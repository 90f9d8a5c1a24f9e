"""MCP servers a project's agents may use as their tools (the engine's `mcp` environment).

A stdio server is a program the workers run: its command comes from the deployment's catalogue
(STUDIO_MCP_STDIO_SERVERS, webapp/mcp_catalogue.py), which only site administrators edit; a project's server names
an entry of it, never a command (DESIGN invariant 7). HTTP header values may hold secrets: they are stored
encrypted (like judge keys) and never rendered back; only their names are kept plain.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models

from webapp.models.projects import Project


class McpServer(models.Model):
    class Transport(models.TextChoices):
        STDIO = "stdio", "stdio: a server of this deployment's catalogue, run by the workers"
        HTTP = "http", "HTTP: a streamable-HTTP server at a URL"

    class TestStatus(models.TextChoices):
        NONE = "", "not tested"
        QUEUED = "queued", "queued"
        RUNNING = "running", "testing"
        OK = "ok", "connected"
        FAILED = "failed", "failed"

    # A test queued or running longer than this lost its worker (or none runs the `judge` queue): it may be asked again.
    TEST_STALE_AFTER = timedelta(seconds=120)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="mcp_servers")
    name = models.CharField(max_length=200)
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.HTTP)
    catalogue_entry = models.CharField(max_length=64, blank=True)  # stdio: the name of a catalogue entry
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
    # The last "test connection": run by a worker (never the web process), polled by the page.
    test_status = models.CharField(max_length=8, choices=TestStatus.choices, blank=True, default="")
    test_error = models.TextField(blank=True)
    test_latency_s = models.FloatField(null=True, blank=True)
    test_requested_at = models.DateTimeField(null=True, blank=True)
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
        """The catalogue entry or URL, as people read it (no header values)."""
        if self.transport == self.Transport.STDIO:
            return f"catalogue: {self.catalogue_entry}"
        return self.url
