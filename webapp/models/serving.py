"""Using what a run trained (issue 37): the project's on-demand inference server and the "Try it" sessions that
ask it. Written by webapp/services/serving.py and trying.py (the web side) and webapp/execution/serving.py and
trying.py (the worker side)."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.models.catalogue import Agent, JudgeConfig, RubricVersion, Scenario
from webapp.models.projects import Project


class ProjectServer(models.Model):
    """One inference server per project and base model, started on a worker when something asks for it (Try it,
    a checkpoint's endpoint) and stopped after STUDIO_SERVE_IDLE_S without use. The row says where it is and
    what it is doing; the worker that holds it beats `heartbeat_at`."""

    class Status(models.TextChoices):
        STARTING = "starting", "Starting"
        READY = "ready", "Ready"
        STOPPED = "stopped", "Stopped"
        FAILED = "failed", "Failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="servers")
    base_model = models.CharField(max_length=1000)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STOPPED)
    kind = models.CharField(max_length=16, blank=True, help_text="The server kind it runs (local, vllm).")
    base_url = models.CharField(max_length=500, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    starts = models.PositiveIntegerField(default=0)
    requested_at = models.DateTimeField(null=True, blank=True, help_text="When the current start was asked for.")
    ready_at = models.DateTimeField(null=True, blank=True)
    startup_s = models.FloatField(null=True, blank=True, help_text="From the request to the server's first answer.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=300, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["project_id", "id"]
        constraints = [models.UniqueConstraint(fields=["project", "base_model"], name="one_server_per_base_model")]

    def __str__(self) -> str:
        return f"{self.base_model} ({self.status})"


class TrySession(models.Model):
    """One question asked of the base and up to three checkpoints side by side, with the agent's environment
    (its tools as in training). `columns` and `answers` are parallel lists; `answers[i]` grows turn by turn
    while the worker rolls out, and the page shows exactly what is stored."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        STARTING = "starting", "Starting the inference server"
        RUNNING = "running", "Answering"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    class JudgeStatus(models.TextChoices):
        NONE = "", "Not judged"
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Judging"
        DONE = "done", "Judged"
        FAILED = "failed", "Failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="try_sessions")
    agent = models.ForeignKey(Agent, null=True, on_delete=models.SET_NULL, related_name="try_sessions")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    base_model = models.CharField(max_length=1000)
    system_prompt = models.TextField(blank=True)
    scenario = models.ForeignKey(Scenario, null=True, blank=True, on_delete=models.SET_NULL)
    user_message = models.TextField()
    context = models.TextField(blank=True)
    # [{"label": "base" | "<run>@<step>", "checkpoint_id": int | None, "model": the name the server serves it by}]
    columns = models.JSONField(default=list)
    # [{"status": waiting|answering|done|failed, "messages": [...], "tools": [...] | None, "error": str,
    #   "seconds": float | None}], one per column
    answers = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    server = models.ForeignKey(ProjectServer, null=True, blank=True, on_delete=models.SET_NULL)
    server_started = models.BooleanField(default=False, help_text="This session's request started the server.")
    server_wait_s = models.FloatField(null=True, blank=True, help_text="How long it waited for the server.")
    first_answer_s = models.FloatField(null=True, blank=True, help_text="From the request to the first answer.")
    error = models.TextField(blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    judge_status = models.CharField(max_length=16, choices=JudgeStatus.choices, default=JudgeStatus.NONE, blank=True)
    judge_config = models.ForeignKey(JudgeConfig, null=True, blank=True, on_delete=models.SET_NULL)
    rubric_version = models.ForeignKey(RubricVersion, null=True, blank=True, on_delete=models.SET_NULL)
    # [{"score": float | None, "explanation": str, "criteria": {...}, "rank": int | None}], one per column
    judge_results = models.JSONField(default=list, blank=True)
    judge_error = models.TextField(blank=True)

    class Meta:
        ordering = ["project_id", "-created_at", "-id"]

    @property
    def live(self) -> bool:
        active = (self.Status.QUEUED, self.Status.STARTING, self.Status.RUNNING)
        return self.status in active or self.judge_status in (self.JudgeStatus.QUEUED, self.JudgeStatus.RUNNING)


class ModelExport(models.Model):
    """A checkpoint merged into its base model (safetensors, tokenizer, chat template, model card), made by a worker
    (queue `gpu`) with its progress on the row; downloaded as a zip."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Merging"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    checkpoint = models.ForeignKey("webapp.Checkpoint", on_delete=models.CASCADE, related_name="exports")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    phase = models.CharField(max_length=200, blank=True)
    progress = models.FloatField(default=0.0)
    path = models.CharField(max_length=1000, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def live(self) -> bool:
        return self.status in (self.Status.QUEUED, self.Status.RUNNING)
