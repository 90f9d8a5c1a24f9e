"""Projects are the authorisation boundary: every object belongs to one, every request checks membership."""
from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"  # sees everything in the project
    REVIEWER = "reviewer", "Reviewer"  # also overrides judge scores and approves review gates
    EDITOR = "editor", "Editor"  # also edits the catalogue and launches / controls runs

    @classmethod
    def rank(cls, role: str) -> int:
        return {cls.VIEWER: 1, cls.REVIEWER: 2, cls.EDITOR: 3}[cls(role)]


class Project(models.Model):
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, max_length=5000)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="owned_projects")
    created_at = models.DateTimeField(auto_now_add=True)
    # The owner's queue priority, within the deployment's STUDIO_QUEUE_PRIORITY_MIN..MAX (webapp/queue_policy.py):
    # a higher one's queued runs are taken first.
    queue_priority = models.SmallIntegerField(default=0)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"
