"""A run and everything it produces. Rows under a run are written only by webapp/live/ingest.py."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from training.types import trajectory_label  # noqa: F401  (the judge's explanations name trajectories by it too)
from webapp.models.catalogue import Agent, JudgeConfig, RubricVersion, Scenario, ScenarioSet
from webapp.models.projects import Project


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    AWAITING_REVIEW = "awaiting_review", "Awaiting review"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    CRASHED = "crashed", "Crashed"


ACTIVE_STATUSES = (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.AWAITING_REVIEW)
PARKED = "(parked: no engine)"  # the `worker` of a paused run, or one awaiting review, whose engine was stopped (services.runs.run_park)
FINAL_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class Run(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="runs")
    name = models.CharField(max_length=100)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="runs")
    agent_version = models.PositiveIntegerField(default=1, help_text="Agent.version at launch.")
    # None only for an SFT run launched without one (it trains on its dataset version; no held-out win rate).
    scenario_set = models.ForeignKey(ScenarioSet, null=True, blank=True, on_delete=models.PROTECT, related_name="runs")
    rubric_version = models.ForeignKey(RubricVersion, null=True, blank=True, on_delete=models.PROTECT)
    judge_config = models.ForeignKey(JudgeConfig, null=True, blank=True, on_delete=models.PROTECT)
    # training.config.RunConfig.model_dump(mode="json"): validated by the engine's own model before saving.
    config = models.JSONField()
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    cancel_requested = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    total_steps = models.PositiveIntegerField(default=0)
    steps_done = models.PositiveIntegerField(default=0)
    phase = models.CharField(max_length=200, blank=True, help_text="What the run is doing right now.")
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When the run was last handed to the executor while queued (null: at creation); the reaper re-sends a run
    # queued for longer than STUDIO_REQUEUE_AFTER_S, whose message the broker may have lost.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_event_seq = models.PositiveIntegerField(default=0)
    review_gate = models.BooleanField(default=False, help_text="Wait for a reviewer's approval after each step's "
                                                                "scoring, and train on the reviewed rewards.")
    # The last step whose rewards were handed to the engine: overrides on later steps still change training,
    # overrides on this one or earlier are kept as labels only.
    reviewed_through_step = models.PositiveIntegerField(default=0)
    # The last step a reviewer approved. A run parked at its review (its engine stopped to free the worker)
    # asks for that step's review again when it resumes on the same groups: approved, it is answered at once.
    review_approved_step = models.PositiveIntegerField(default=0)
    # Waiting for the judge (issue 49): since when its provider has been failing (kept across retries, cleared
    # once a step trains), and when the parked run is queued again (null once it is).
    judge_down_since = models.DateTimeField(null=True, blank=True)
    judge_retry_at = models.DateTimeField(null=True, blank=True)
    # An SFT run's conversations (config kind "sft"): the immutable version it trains on, written by the worker
    # to the run's output directory as its engine's data file (execution/runner.py).
    dataset_version = models.ForeignKey("DatasetVersion", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="runs")
    parent_run = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks")
    parent_checkpoint = models.ForeignKey("Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                          related_name="forks")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The launch form's one-time token: the same form submitted twice (back button, double click) is one run.
    launch_token = models.CharField(max_length=64, blank=True, default="")
    # An external agent's run: its inference server, from the engine's newest `rollouts_wanted`, where the run's
    # OpenAI-compatible endpoint forwards. Kept here, not in the event the browser is sent.
    external_base_url = models.CharField(max_length=500, blank=True, default="")
    # Secrets the engine reads from its environment (an MCP server's HTTP header values), frozen at launch:
    # Fernet of a JSON object {variable: value}. The config names the variables only (never the values).
    secrets_encrypted = models.TextField(blank=True, default="", editable=False)
    # What the checkpoint retention policy deleted once the run ended (services/checkpoint_retention.py):
    # {"steps": [...], "freed_bytes": int, "at": iso time}; the run page says it beside the checkpoints kept.
    checkpoints_pruned = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["project", "launch_token"], condition=~models.Q(launch_token=""),
                                               name="run_launch_token_unique_in_project")]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"

    @property
    def kind(self) -> str:
        """grpo (reinforce) or sft (teach), as the engine config says."""
        return self.config.get("kind") or "grpo"

    @property
    def uses_judge(self) -> bool:
        return bool(self.config.get("judge"))

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def output_dir(self) -> str:
        return self.config.get("output_dir", "")


class Step(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    # step_finished metrics as the engine sent them: reward_mean/std/min/max, judge_mean, env_mean, loss, kl, ...
    metrics = models.JSONField(default=dict)
    judge_cost_usd = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="step_unique_in_run")]


class TrajectoryGroup(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="groups")
    step_index = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    scenario = models.ForeignKey(Scenario, null=True, blank=True, on_delete=models.SET_NULL)
    scenario_external_id = models.CharField(max_length=200)
    role = models.CharField(max_length=40, blank=True, default="",
                            help_text="The part its trajectories played in a game with several players ('' for one).")
    reward_mean = models.FloatField(null=True, blank=True)
    reward_std = models.FloatField(null=True, blank=True)
    skipped = models.BooleanField(default=False)
    errors = models.JSONField(default=list, blank=True)
    scoring_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "-step_index", "index"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step_index", "index"], name="group_unique_in_step")
        ]

    @property
    def judge_mean(self) -> float | None:
        """The judge's own mean score; `reward_mean` is the mean of the effective rewards (human scores where
        given), the ones the step trains on."""
        scores = [t.judge_score for t in self.trajectories.all() if t.judge_score is not None]
        return sum(scores) / len(scores) if scores else None

    @property
    def zero_variance(self) -> bool:
        """Skipped because every reward was equal; a group whose scoring failed is skipped for that reason."""
        return self.skipped and not self.scoring_error


class Trajectory(models.Model):
    group = models.ForeignKey(TrajectoryGroup, on_delete=models.CASCADE, related_name="trajectories")
    index = models.PositiveIntegerField(help_text="Position in the group as rolled out.")
    rank = models.PositiveIntegerField(default=0, help_text="1 = highest reward in the group.")
    messages = models.JSONField(default=list)
    tools = models.JSONField(null=True, blank=True)
    env_reward = models.FloatField(null=True, blank=True)
    judge_score = models.FloatField(null=True, blank=True)
    explanation = models.TextField(blank=True)
    criteria = models.JSONField(default=dict, blank=True)
    reward = models.FloatField(null=True, blank=True)
    override_score = models.FloatField(null=True, blank=True)
    advantage = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    completion_tokens = models.PositiveIntegerField(default=0)
    metadata = models.JSONField(default=dict, blank=True)
    rubric_version = models.ForeignKey(RubricVersion, null=True, blank=True, on_delete=models.SET_NULL)
    judge_model = models.CharField(max_length=300, blank=True)
    role = models.CharField(max_length=40, blank=True, default="", help_text="The part played ('x', 'spymaster').")
    episode = models.CharField(max_length=40, blank=True, default="", db_index=True,
                               help_text="Shared by the sides of one game: its other trajectories are the other sides.")

    class Meta:
        ordering = ["group_id", "rank", "index"]
        constraints = [models.UniqueConstraint(fields=["group", "index"], name="trajectory_unique_in_group")]

    @property
    def label(self) -> str:
        """The trajectory's one name within its group on every page, the audit, the API and exports (DESIGN §8
        invariant 2): a letter from its rollout position, which never changes, unlike its rank."""
        return trajectory_label(self.index)

    @property
    def effective_reward(self) -> float | None:
        return self.override_score if self.override_score is not None else self.reward

    @property
    def final_answer(self) -> str:
        for message in reversed(self.messages or []):
            if message.get("role") == "assistant" and message.get("content"):
                return str(message["content"])
        return ""


class Checkpoint(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step_index = models.PositiveIntegerField()
    path = models.CharField(max_length=1000)
    adapter_name = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)
    # Last asked for by Try it, a checkpoint's endpoint or a distillation's teacher: a served checkpoint is kept
    # by the retention policy (services/checkpoint_retention.py), since someone may call it again.
    served_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "step_index"]
        constraints = [models.UniqueConstraint(fields=["run", "step_index"], name="checkpoint_unique_in_run")]


class JudgeCall(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="judge_calls")
    group = models.ForeignKey(TrajectoryGroup, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="judge_calls")
    judge_model = models.CharField(max_length=300, blank=True)
    prompt_hash = models.CharField(max_length=128, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.FloatField(null=True, blank=True)
    # Provider prompt caching (judging.JudgeCall): the request's run-constant prefix and the whole request in
    # locally counted tokens, the prompt tokens the provider served from its cache, and the price without that.
    prefix_tokens = models.PositiveIntegerField(null=True, blank=True)
    counted_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)  # billed above the input price
    uncached_cost_usd = models.FloatField(null=True, blank=True)
    latency_s = models.FloatField(null=True, blank=True)
    cached = models.BooleanField(default=False)
    raw_reply = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "id"]


class AppendOnlyError(RuntimeError):
    pass


class RunEvent(models.Model):
    """What the browser was sent, in order. A page that joins late replays from here; never updated."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=50)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="event_seq_unique_in_run")]

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None:
            raise AppendOnlyError("run events are append-only")
        super().save(*args, **kwargs)

    def as_message(self) -> dict:
        return {"seq": self.seq, "kind": self.kind, "data": self.payload}
