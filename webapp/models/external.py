"""External rollouts (issue 21): project API tokens, and what an agent in the user's own code sends a run: the
calls it sampled through the run's endpoint, the groups it submitted, and the clients that are connected."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.models.projects import Project
from webapp.models.runs import Run


class ProjectToken(models.Model):
    """A revocable key that acts as its creator, in its project only. Only the key's sha256 is stored: the key
    is shown once, at creation."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="The key's first characters, to tell keys apart.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="project_tokens")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project_id", "-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class ExternalCall(models.Model):
    """One chat completion sampled through a run's endpoint for a trajectory (header X-Trajectory-Id) of an open
    step's group. Stored as the messages it added: `parent` is the trajectory's longest earlier call whose whole
    conversation this one's begins with, and `messages` holds what came after it (everything when there is
    none), so a trajectory of T turns keeps O(T) messages rather than O(T²). services/external_calls.py rebuilds
    what the server was sent; `digest` (a hash chain over those messages) finds the parent."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="external_calls")
    trajectory_key = models.CharField(max_length=64)
    step = models.PositiveIntegerField(null=True, help_text="The open step it was sampled for (None: recorded "
                                       "before calls were bound to a step).")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    messages = models.JSONField(default=list)  # what this call was sent after its parent's messages
    length = models.PositiveIntegerField(default=0, help_text="How many messages the call was sent in all.")
    digest = models.CharField(max_length=64, default="", help_text="The hash chain over all of them.")
    tools = models.JSONField(null=True, blank=True)
    model = models.CharField(max_length=300)
    choices = models.JSONField(default=list)  # [{"message", "token_ids", "logprobs", "finish_reason"}]
    completion_tokens = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "id"]
        indexes = [models.Index(fields=["run", "trajectory_key"], name="external_call_trajectory")]


class ExternalGroup(models.Model):
    """A group the user's code submitted, assembled into the engine's trajectories; the runner forwards it to the
    engine (forwarded_at)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="external_groups")
    step = models.PositiveIntegerField()
    group_index = models.PositiveIntegerField()
    trajectories = models.JSONField(default=list)  # training.rl.external.assemble_trajectory's dicts
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                     related_name="+")
    token = models.ForeignKey(ProjectToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    forwarded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "step", "group_index"]
        constraints = [models.UniqueConstraint(fields=["run", "step", "group_index"],
                                               name="external_group_once_per_step")]


class ExternalTrajectory(models.Model):
    """A trajectory id a submitted group used: an id trains once per run."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(ExternalGroup, on_delete=models.CASCADE, related_name="keys")
    key = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="external_trajectory_id_once_per_run")]


class ExternalClient(models.Model):
    """A process that rolls out for a run (header X-Client-Id): connected while seen in the last 30 s."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="external_clients")
    client_id = models.CharField(max_length=64)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["run_id", "client_id"]
        constraints = [models.UniqueConstraint(fields=["run", "client_id"], name="external_client_once_per_run")]
