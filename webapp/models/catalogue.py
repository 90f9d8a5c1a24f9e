"""What a run is made of: the agent, its scenarios, the rubric (immutable versions) and the judge."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.models.projects import Project

# Bounds on free text keep one pasted novel from reaching the judge prompt or the page unnoticed.
PROMPT_MAX = 20_000
MESSAGE_MAX = 20_000


class Agent(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=200)
    # Stored as chosen (a catalogue name or an allowed id); agents saved before the catalogue may hold a source.
    base_model = models.CharField(max_length=500, help_text="A name from the deployment's model catalogue "
                                  "(STUDIO_BASE_MODELS) or a Hugging Face id it allows (STUDIO_HF_MODELS).")
    system_prompt = models.TextField(blank=True, max_length=PROMPT_MAX)
    environment_kind = models.CharField(max_length=100, default="chat")
    environment_options = models.JSONField(default=dict, blank=True)
    temperature = models.FloatField(default=1.0)
    top_p = models.FloatField(default=1.0)
    max_tokens = models.PositiveIntegerField(default=256)
    # Goes up when an agent some run used is edited: the run keeps the settings of the version it was launched
    # with (frozen in Run.config) and shows "v1 (now v2)".
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="agent_name_unique_in_project")]

    def __str__(self) -> str:
        return self.name


class ScenarioSet(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="scenario_sets")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, max_length=5000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="scenario_set_name_unique")]

    def __str__(self) -> str:
        return self.name


class Scenario(models.Model):
    class Split(models.TextChoices):
        TRAIN = "train", "Train"
        VALIDATION = "validation", "Validation"

    scenario_set = models.ForeignKey(ScenarioSet, on_delete=models.CASCADE, related_name="scenarios")
    external_id = models.CharField(max_length=200, help_text="Stable id within the set (used by the engine).")
    user_message = models.TextField(max_length=MESSAGE_MAX)
    context = models.TextField(blank=True, max_length=MESSAGE_MAX)
    reference = models.TextField(blank=True, max_length=MESSAGE_MAX)
    metadata = models.JSONField(default=dict, blank=True)
    split = models.CharField(max_length=16, choices=Split.choices, default=Split.TRAIN)
    # Once a run used a scenario it is never rewritten: an edit retires this row (kept for the groups that link to
    # it) and adds the next version under the same id; new runs use the current (unretired) one.
    version = models.PositiveIntegerField(default=1)
    retired = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["scenario_set", "external_id"], condition=models.Q(retired=False),
                                    name="scenario_id_unique_in_set")
        ]

    def __str__(self) -> str:
        return self.external_id


class Rubric(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rubrics")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="rubric_name_unique")]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self) -> "RubricVersion | None":
        return self.versions.order_by("-number").first()


class ImmutableError(RuntimeError):
    pass


class RubricVersion(models.Model):
    """Never edited: a changed rubric is a new version, so every judge score names the exact text it used."""

    rubric = models.ForeignKey(Rubric, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    text = models.TextField(max_length=PROMPT_MAX)
    # [{"name": str, "description": str, "weight": float}], empty for a single overall score.
    criteria = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rubric_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["rubric", "number"], name="rubric_version_unique")]

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ImmutableError("rubric versions are immutable; create a new version instead")
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.rubric.name} v{self.number}"


class JudgeConfig(models.Model):
    """A judge model and how to call it. The API key is never stored in plain text nor rendered back:
    either the name of an environment variable holding it, or a Fernet-encrypted value."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="judge_configs")
    name = models.CharField(max_length=200)
    model = models.CharField(max_length=300, help_text="A litellm model string, e.g. openai/gpt-4o-mini.")
    api_base = models.URLField(blank=True, max_length=500)
    api_key_env = models.CharField(max_length=100, blank=True)
    api_key_encrypted = models.TextField(blank=True, editable=False)
    temperature = models.FloatField(default=0.0)
    passes = models.PositiveSmallIntegerField(default=1)
    concurrency = models.PositiveSmallIntegerField(default=4)
    budget_usd = models.DecimalField(max_digits=10, decimal_places=2, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="judge_name_unique")]

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"

    @property
    def has_stored_key(self) -> bool:
        return bool(self.api_key_encrypted)
