"""Datasets: versioned conversations that SFT runs train on, uploaded as JSONL or distilled from a teacher.

A version is immutable (its rows never change): an upload, accepted distillation drafts or an edit make the next
version, and a run names the version it trained on, so what a run shows and resumes with never moves (DESIGN
§8 invariant 1). Rows are the OpenAI chat format as training/sft/data.py validates it.

Stored data is shared, not copied (DESIGN §8 invariant 8): a row is stored once, by the version that added it
(`DatasetRow.version`), at its position in every version that holds it (`index`). An appended version stores
only its new rows and names its `base`; its rows are the rows of its chain (itself, its base, the base's base...),
whose positions are disjoint and contiguous, so `version.rows.order_by("index")` reads them in order.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import QuerySet

from webapp.models.catalogue import ImmutableError
from webapp.models.projects import Project


class Dataset(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, max_length=5000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="dataset_name_unique_in_project")]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self) -> "DatasetVersion | None":
        return self.versions.order_by("-number").first()


class DatasetVersion(models.Model):
    class Source(models.TextChoices):
        UPLOAD = "upload", "Upload"
        DISTILLATION = "distillation", "Distillation"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    source = models.CharField(max_length=20, choices=Source.choices)
    note = models.CharField(max_length=500, blank=True, help_text="Where the rows came from, in a sentence.")
    # The version this one added rows to (None: it replaced the rows, or it is the first). Its rows are part of
    # this version's, so it can only go with its dataset (RESTRICT), never alone.
    base = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT, related_name="+")
    row_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["dataset_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["dataset", "number"], name="dataset_version_unique")]

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise ImmutableError("dataset versions are immutable; create a new version instead")
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.dataset.name} v{self.number}"

    def chain_ids(self) -> list[int]:
        """This version's id and its bases' (newest first): the versions that stored its rows. One query."""
        if self.base_id is None:
            return [self.pk]
        bases = dict(DatasetVersion.objects.filter(dataset_id=self.dataset_id, number__lt=self.number)
                     .values_list("id", "base_id"))
        chain, current = [self.pk], self.base_id
        while current is not None and current not in chain:
            chain.append(current)
            current = bases.get(current)
        return chain

    @property
    def rows(self) -> QuerySet["DatasetRow"]:
        """Every row of this version (its own and its bases'), to be ordered by `index`."""
        return DatasetRow.objects.filter(version_id__in=self.chain_ids(), index__lt=self.row_count)


class DatasetRow(models.Model):
    # The version that added the row; the versions appended after it hold it too (DatasetVersion.rows).
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="own_rows")
    index = models.PositiveIntegerField(help_text="0-based position in the versions that hold it (its JSONL line "
                                                  "order).")
    messages = models.JSONField()
    tools = models.JSONField(null=True, blank=True)
    # Where the row came from: {"line": N} for an upload; for distillation the scenario, teacher, judge score.
    metadata = models.JSONField(default=dict, blank=True)
    # Bytes of the row as JSON (messages, tools, metadata), counted against the project's dataset bytes.
    size = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["version_id", "index"]
        constraints = [models.UniqueConstraint(fields=["version", "index"], name="dataset_row_unique_in_version")]

    def as_json(self) -> dict:
        """The row as a JSONL line of the export holds it (and as the engine reads it)."""
        row: dict = {"messages": self.messages}
        if self.tools:
            row["tools"] = self.tools
        return row


class Distillation(models.Model):
    """A distillation job: a teacher answers the scenario set's training scenarios `answers_per_scenario` times,
    the judge ranks each scenario's answers against the rubric, and the best one at or above `threshold`
    becomes a draft, reviewed (edited, dropped) before the accepted drafts make the dataset's next version."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        STOPPED = "stopped", "Stopped at a budget"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"  # by a person: no new scenario starts; the drafts made so far are kept
        ACCEPTED = "accepted", "Accepted"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="distillations")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="distillations")
    agent = models.ForeignKey("Agent", on_delete=models.PROTECT, related_name="+",
                              help_text="The student: its system prompt, environment and sampling shape the answers.")
    scenario_set = models.ForeignKey("ScenarioSet", on_delete=models.PROTECT, related_name="+")
    # The teacher is one of two: a model configured like a judge (litellm model, API, key, budget), or a checkpoint
    # of this project served by the project's inference server (webapp/execution/serving.py).
    teacher = models.ForeignKey("JudgeConfig", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                help_text="The teacher model, configured like a judge (litellm model, API, key, budget).")
    teacher_checkpoint = models.ForeignKey("Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                           related_name="+",
                                           help_text="A checkpoint of this project as the teacher, served by name.")
    judge_config = models.ForeignKey("JudgeConfig", on_delete=models.PROTECT, related_name="+")
    rubric_version = models.ForeignKey("RubricVersion", null=True, blank=True, on_delete=models.PROTECT,
                                       related_name="+")
    answers_per_scenario = models.PositiveSmallIntegerField(default=4)
    threshold = models.FloatField(default=0.5)
    max_scenarios = models.PositiveIntegerField(default=50)
    # The frozen inputs (as a run freezes its config): scenarios, system prompt, environment, sampling, judge.
    config = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Teacher and judge requests, tokens and cost; scenarios done, chosen and why the others were not.
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    accepted_version = models.ForeignKey(DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                         related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]


class DistillationDraft(models.Model):
    """One scenario's outcome: the chosen answer as a conversation (kept, edited or dropped), or why none was."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending review"
        DROPPED = "dropped", "Dropped"
        REJECTED = "rejected", "Below the threshold"  # nothing chosen: shown with its reason, never accepted

    distillation = models.ForeignKey(Distillation, on_delete=models.CASCADE, related_name="drafts")
    index = models.PositiveIntegerField()
    scenario_external_id = models.CharField(max_length=200)
    messages = models.JSONField(default=list)
    tools = models.JSONField(null=True, blank=True)
    candidates = models.PositiveSmallIntegerField(default=0)
    rewards = models.JSONField(default=list)  # every candidate's reward, in rollout order
    reward = models.FloatField(null=True, blank=True)
    judge_score = models.FloatField(null=True, blank=True)
    explanation = models.TextField(blank=True)
    reason = models.TextField(blank=True)  # why nothing was chosen
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    edited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")

    class Meta:
        ordering = ["distillation_id", "index"]
        constraints = [models.UniqueConstraint(fields=["distillation", "index"], name="draft_unique_in_distillation")]
