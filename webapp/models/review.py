"""Human review: score overrides (an append-only audit trail) and rubric-playground re-scores."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.models.catalogue import JudgeConfig, RubricVersion
from webapp.models.projects import Project
from webapp.models.runs import AppendOnlyError, Run, Trajectory, TrajectoryGroup


class ScoreOverride(models.Model):
    """One change of a trajectory's human score: who, when, before and after, why. Never updated or deleted by
    the app; the step/group/trajectory positions are copied so the record outlives a re-done step's rows."""

    class Kind(models.TextChoices):
        SCORE = "score", "Score set"
        REORDER = "reorder", "Group reordered"
        CLEAR = "clear", "Override removed"
        CARRIED = "carried", "Carried to the step's redo"

    class Redo(models.TextChoices):
        """What became of this change when its step was rolled out again (webapp/live/override_redo.py)."""
        NONE = "", "—"
        CARRIED = "carried", "carried to the redo (same answer)"
        DISCARDED = "discarded", "discarded with the step's redo"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="overrides")
    trajectory = models.ForeignKey(Trajectory, null=True, on_delete=models.SET_NULL, related_name="overrides")
    group = models.ForeignKey(TrajectoryGroup, null=True, on_delete=models.SET_NULL, related_name="overrides")
    step_index = models.PositiveIntegerField()
    group_index = models.PositiveIntegerField()
    trajectory_index = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    judge_score = models.FloatField(null=True, blank=True, help_text="The judge's score, kept as it was.")
    before = models.FloatField(null=True, blank=True, help_text="The override before this change (None: none).")
    after = models.FloatField(null=True, blank=True, help_text="The override after this change (None: removed).")
    reason = models.TextField(max_length=2000)
    # True when the step had not trained yet: this change reached the rewards the step trained on.
    applies_to_training = models.BooleanField(default=False)
    # Set once, when the step was rolled out again and this row's group replaced: the only change ever made to a
    # row (applies_to_training then turns false: the group it applied to never trained).
    redo = models.CharField(max_length=16, choices=Redo.choices, default=Redo.NONE, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "-id"]

    @property
    def training_note(self) -> str:
        """What this change did to training, in the words every page and the API use."""
        if self.redo == self.Redo.DISCARDED:
            return f"discarded with step {self.step_index}'s redo (the new rollout has no identical answer)"
        if self.redo == self.Redo.CARRIED:
            return f"carried to step {self.step_index}'s redo (same scenario and answer text)"
        if not self.applies_to_training:
            return "label only (step had trained)"
        run = self.run
        if self.step_index <= run.reviewed_through_step:
            return "changed the step's rewards"
        if self.step_index <= run.steps_done or run.status == "completed":  # trained without a review handshake
            return "label only (the step trained on the judge's rewards)"
        from webapp.review_state import override_pending_note  # pure policy on the run's row, no queries

        return override_pending_note(run, self.step_index)

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise AppendOnlyError("score overrides are an audit trail: append a new one instead")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("score overrides are an audit trail and are never deleted")


class Rescore(models.Model):
    """A rubric-playground job: stored groups re-scored with a candidate rubric / judge, never touching the runs."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rescores")
    base_version = models.ForeignKey(RubricVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+", help_text="The version the candidate was edited from.")
    rubric_text = models.TextField(max_length=20_000)
    criteria = models.JSONField(default=list, blank=True)
    judge_config = models.ForeignKey(JudgeConfig, on_delete=models.PROTECT, related_name="rescores")
    judge_model = models.CharField(max_length=300, help_text="The judge's model, or another one to try.")
    temperature = models.FloatField(default=0.0)
    passes = models.PositiveSmallIntegerField(default=1)
    group_ids = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # Beaten while a worker judges: a re-score whose worker died is failed by the reaper, never left running.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    results = models.JSONField(default=list, blank=True)  # one record per group (see services/playground.py)
    summary = models.JSONField(default=dict, blank=True)  # agreement, cost, calls, cache hits
    error = models.TextField(blank=True)
    saved_version = models.ForeignKey(RubricVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
