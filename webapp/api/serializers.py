"""API shapes. Serializers validate input types only; every write is done by a service in the views."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from webapp.models import (
    Agent, Checkpoint, Rescore, ScoreOverride, JudgeConfig, McpServer, Project, Rubric, RubricVersion, Run, Scenario, ScenarioSet, Step, Trajectory,
    TrajectoryGroup,
)
from webapp.models.catalogue import MESSAGE_MAX, PROMPT_MAX
from webapp.models.runs import trajectory_label
from webapp.run_policy import config_for_people
from webapp.selectors.runs import run_fork_origin, run_judge_cost


# Bounds the services enforce (webapp/services/catalogue.py), stated in the schema: "above 0" has no DRF field.
@extend_schema_field({"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": True, "maximum": 100})
class WeightField(serializers.FloatField):
    """A criterion's weight: above 0 and at most 100."""


@extend_schema_field({"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": True, "maximum": 1})
class TopPField(serializers.FloatField):
    """Nucleus sampling's top_p: above 0 and at most 1."""


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = ["id", "name", "description", "owner", "created_at", "queue_priority"]
        # the owner sets it on the project page, within the site's bounds (webapp/queue_policy.py)
        read_only_fields = ["owner", "created_at", "queue_priority"]


class AgentSerializer(serializers.ModelSerializer):
    # checked by the agent services (webapp/model_catalogue.py): a 400 naming base_model for anything else
    base_model = serializers.CharField(max_length=200, help_text="A name from this deployment's model catalogue, or "
                                       "a Hugging Face id it allows (STUDIO_HF_MODELS); never a path.")
    system_prompt = serializers.CharField(required=False, allow_blank=True, max_length=PROMPT_MAX)
    temperature = serializers.FloatField(required=False, min_value=0.0, max_value=2.0)
    top_p = TopPField(required=False)
    max_tokens = serializers.IntegerField(required=False, min_value=1, max_value=32768)
    environment_options = serializers.DictField(required=False, help_text="The environment's options (a JSON object).")

    class Meta:
        model = Agent
        fields = ["id", "project", "name", "base_model", "system_prompt", "environment_kind", "environment_options",
                  "temperature", "top_p", "max_tokens", "version", "created_at", "updated_at"]
        read_only_fields = ["version", "created_at", "updated_at"]
        validators = []  # uniqueness is the service's answer (same message as the page)


class ScenarioSerializer(serializers.ModelSerializer):
    user_message = serializers.CharField(max_length=MESSAGE_MAX)
    context = serializers.CharField(required=False, allow_blank=True, max_length=MESSAGE_MAX)
    reference = serializers.CharField(required=False, allow_blank=True, max_length=MESSAGE_MAX)
    external_id = serializers.CharField(required=False, allow_blank=True, max_length=200)
    metadata = serializers.DictField(required=False)

    class Meta:
        model = Scenario
        fields = ["id", "external_id", "user_message", "context", "reference", "split", "metadata"]
        validators = []


class ScenarioSetSerializer(serializers.ModelSerializer):
    scenario_count = serializers.SerializerMethodField()

    class Meta:
        model = ScenarioSet
        fields = ["id", "project", "name", "description", "scenario_count", "created_at"]
        read_only_fields = ["created_at"]
        validators = []

    def get_scenario_count(self, obj: ScenarioSet) -> int:
        return obj.scenarios.filter(retired=False).count()


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField()




class CriterionSerializer(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z][A-Za-z0-9_]{0,49}$", max_length=50,
                                  help_text="A short identifier: a letter, then letters, digits or _.")
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    weight = WeightField(required=False, default=1.0)


class RubricVersionSerializer(serializers.ModelSerializer):
    criteria = CriterionSerializer(many=True, required=False)
    text = serializers.CharField(max_length=PROMPT_MAX)

    class Meta:
        model = RubricVersion
        fields = ["id", "number", "text", "criteria", "created_by", "created_at"]
        read_only_fields = ["number", "created_by", "created_at"]


class RubricSerializer(serializers.ModelSerializer):
    text = serializers.CharField(write_only=True, max_length=PROMPT_MAX)
    criteria = CriterionSerializer(many=True, required=False, write_only=True)
    versions = RubricVersionSerializer(many=True, read_only=True)

    class Meta:
        model = Rubric
        fields = ["id", "project", "name", "text", "criteria", "versions", "created_at"]
        read_only_fields = ["created_at"]
        validators = []


class JudgeConfigSerializer(serializers.ModelSerializer):
    api_key = serializers.CharField(write_only=True, required=False, allow_blank=True, max_length=500,
                                    help_text="Stored encrypted; never returned.")
    clear_api_key = serializers.BooleanField(write_only=True, required=False, default=False)
    has_stored_key = serializers.BooleanField(read_only=True)
    key_dropped = serializers.SerializerMethodField(
        help_text="True when this request removed the stored key: the API base or the model's provider changed "
                  "and no api_key was given with it (a key is never sent to a destination it was not given for).")
    temperature = serializers.FloatField(required=False, min_value=0.0, max_value=2.0)
    passes = serializers.IntegerField(required=False, min_value=1, max_value=10)
    concurrency = serializers.IntegerField(required=False, min_value=1, max_value=64)

    class Meta:
        model = JudgeConfig
        fields = ["id", "project", "name", "model", "api_base", "api_key_env", "api_key", "clear_api_key",
                  "has_stored_key", "key_dropped", "temperature", "passes", "concurrency", "budget_usd",
                  "created_at"]
        read_only_fields = ["created_at"]
        validators = []

    def get_key_dropped(self, judge: JudgeConfig) -> bool:
        return bool(getattr(judge, "key_dropped", False))


class McpServerSerializer(serializers.ModelSerializer):
    headers = serializers.DictField(child=serializers.CharField(max_length=2000), write_only=True, required=False,
                                    help_text="HTTP headers {name: value}: stored encrypted, never returned; "
                                              "a header left out keeps its stored value, unless the URL moves to "
                                              "another origin (scheme, host or port): then the stored ones are "
                                              "dropped (`headers_dropped` names them) and only these are kept.")
    clear_headers = serializers.BooleanField(write_only=True, required=False, default=False)
    catalogue_entry = serializers.CharField(required=False, allow_blank=True, max_length=64,
                                            help_text="stdio: the name of one of this deployment's stdio servers "
                                                      "(GET /api/mcp-catalogue/). Commands, arguments, environment "
                                                      "and working directory are never accepted (400).")
    headers_dropped = serializers.SerializerMethodField(
        help_text="Stored headers this request removed because the URL moved to another origin.")
    # the service's bounds (webapp/services/mcp_servers.py), stated in the schema
    per_call_timeout_s = serializers.FloatField(required=False, min_value=0.001, max_value=600)
    max_result_chars = serializers.IntegerField(required=False, min_value=100, max_value=200_000)
    max_concurrent_calls = serializers.IntegerField(required=False, min_value=1, max_value=256)

    class Meta:
        model = McpServer
        fields = ["id", "project", "name", "transport", "catalogue_entry", "url", "headers", "clear_headers",
                  "header_names", "headers_dropped", "per_call_timeout_s", "max_result_chars",
                  "max_concurrent_calls", "tools", "tools_listed_at", "created_at"]
        read_only_fields = ["header_names", "tools", "tools_listed_at", "created_at"]
        validators = []

    def get_headers_dropped(self, server: McpServer) -> list[str]:
        return list(getattr(server, "headers_dropped", []))

    def validate(self, attrs: dict) -> dict:
        from webapp.services.mcp_servers import mcp_command_fields_refuse

        if isinstance(self.initial_data, dict):  # unknown keys are otherwise ignored: these are refused
            try:
                mcp_command_fields_refuse(sent=self.initial_data)
            except DjangoValidationError as err:
                raise serializers.ValidationError(err.message_dict) from None
        return attrs


class McpConnectionTestSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["", "queued", "running", "ok", "failed", "stale"],
                                     help_text="queued/running: poll GET until it is ok, failed or stale.")
    ok = serializers.BooleanField()
    tools = serializers.ListField(child=serializers.DictField())
    error = serializers.CharField(help_text="The named fault (McpServerExited: …), empty when ok.")
    latency_s = serializers.FloatField(allow_null=True)


class McpCatalogueEntrySerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()


class ForkOriginSerializer(serializers.Serializer):
    run = serializers.IntegerField(help_text="The parent run's id.")
    run_name = serializers.CharField()
    step = serializers.IntegerField(help_text="The step of the parent's checkpoint the fork started from.")


class RunSerializer(serializers.ModelSerializer):
    uses_judge = serializers.BooleanField(read_only=True)
    config = serializers.SerializerMethodField(
        help_text="The engine config frozen at launch, without the worker's paths and addresses (output_dir, "
                  "init_checkpoint, the inference server's url/host/port).")
    started_from = serializers.SerializerMethodField(help_text="A fork's origin: the parent run and step.")

    class Meta:
        model = Run
        fields = ["id", "project", "name", "agent", "agent_version", "scenario_set", "rubric_version", "judge_config",
                  "config", "review_gate", "reviewed_through_step", "parent_run", "parent_checkpoint", "started_from",
                  "dataset_version", "status", "phase", "error", "cancel_requested", "total_steps", "steps_done",
                  "uses_judge",
                  "worker", "heartbeat_at", "attempts", "created_at", "started_at", "finished_at"]
        read_only_fields = fields

    @extend_schema_field({"type": "object", "additionalProperties": True})
    def get_config(self, run: Run) -> dict[str, Any]:
        return config_for_people(run.config or {})

    @extend_schema_field(ForkOriginSerializer(allow_null=True))
    def get_started_from(self, run: Run) -> dict[str, Any] | None:
        return run_fork_origin(run=run)


class RunDetailSerializer(RunSerializer):
    """One run, with what its judge cost: calls really sent and their price, cache hits (free) apart."""

    judge_cost = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["judge_cost"]
        read_only_fields = fields

    def get_judge_cost(self, run: Run) -> dict[str, Any]:
        return run_judge_cost(run=run)


class SFTOptionsSerializer(serializers.Serializer):
    """The explicit SFT options a launch may set (training/config/sft.py documents each); the data is a dataset
    version, never a file."""

    epochs = serializers.IntegerField(required=False, min_value=1, max_value=1000)
    max_steps = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=1_000_000)
    batch_tokens = serializers.IntegerField(required=False, min_value=16)
    micro_batch_tokens = serializers.IntegerField(required=False, min_value=16)
    learning_rate = serializers.FloatField(required=False, min_value=1e-12, max_value=1.0)
    warmup_ratio = serializers.FloatField(required=False, min_value=0.0, max_value=0.5)
    schedule = serializers.ChoiceField(choices=["cosine", "linear", "constant"], required=False)
    min_lr_ratio = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    weight_decay = serializers.FloatField(required=False, min_value=0.0)
    max_grad_norm = serializers.FloatField(required=False, min_value=1e-9)
    held_out_fraction = serializers.FloatField(required=False, min_value=0.0, max_value=0.99)
    eval_every = serializers.IntegerField(required=False, min_value=1)
    save_every = serializers.IntegerField(required=False, min_value=1)

    def to_internal_value(self, data):
        if isinstance(data, dict) and (unknown := sorted(set(data) - set(self.fields))):
            raise serializers.ValidationError(f"not an SFT option: {', '.join(map(str, unknown))} (the options: "
                                              f"{', '.join(self.fields)})")
        return super().to_internal_value(data)


class RunCreateSerializer(serializers.Serializer):
    project = serializers.IntegerField()
    name = serializers.CharField(max_length=100)
    agent = serializers.IntegerField()
    scenario_set = serializers.IntegerField(required=False, allow_null=True,
                                            help_text="grpo: required, the scenarios it rolls out; sft: optional, "
                                                      "its validation scenarios give the held-out win rate.")
    rubric_version = serializers.IntegerField(required=False, allow_null=True)
    judge_config = serializers.IntegerField(required=False, allow_null=True)
    steps = serializers.IntegerField(min_value=1, max_value=100000, default=10)
    group_size = serializers.IntegerField(min_value=2, max_value=256, default=4)
    groups_per_step = serializers.IntegerField(min_value=1, max_value=1024, default=2)
    learning_rate = serializers.FloatField(min_value=1e-9, max_value=1.0, default=1e-5)
    seed = serializers.IntegerField(min_value=0, default=0)
    overrides = serializers.DictField(required=False, default=dict)
    review_gate = serializers.BooleanField(required=False, default=False)
    launch_token = serializers.CharField(required=False, allow_blank=True, max_length=64, default="",
                                         help_text="Idempotency key: a repeated request with the same key returns "
                                                   "the run the first one created.")
    kind = serializers.ChoiceField(choices=["grpo", "sft"], default="grpo",
                                   help_text="grpo: reinforce (roll out, score, train); sft: teach from a dataset "
                                             "version's conversations (then steps, group sizes and learning_rate "
                                             "do not apply).")
    dataset_version = serializers.IntegerField(required=False, allow_null=True,
                                               help_text="kind sft: the dataset version to teach from.")
    sft = SFTOptionsSerializer(required=False, help_text="kind sft: how to teach (docs/sft.md); unset options "
                                                         "take the engine's defaults.")
    trackers = serializers.ListField(
        child=serializers.ChoiceField(choices=["wandb", "mlflow", "langfuse"]), required=False, max_length=3,
        help_text="Experiment trackers the run reports to, among those the site offers (docs/use.md).")


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = ["index", "metrics", "judge_cost_usd", "created_at"]


class RewardViewSerializer(serializers.Serializer):
    """webapp.selectors.rewards.trajectory_rewards: what every page shows."""
    label = serializers.CharField()
    judge_score = serializers.FloatField(allow_null=True)
    env_reward = serializers.FloatField(allow_null=True)
    human_score = serializers.FloatField(allow_null=True)
    effective_reward = serializers.FloatField(allow_null=True)
    trained = serializers.BooleanField(help_text="The step has trained.")
    trained_reward = serializers.FloatField(allow_null=True, help_text="The reward the step trained on.")
    advantage = serializers.FloatField(allow_null=True)
    note = serializers.CharField()


class TrajectorySummarySerializer(serializers.ModelSerializer):
    label = serializers.CharField(read_only=True, help_text="The trajectory's stable name within its group.")
    reward = serializers.FloatField(
        source="effective_reward", read_only=True, allow_null=True,
        help_text="The reward that trains (or trained): the human score where a reviewer set one, else the scored "
                  "reward (the judge's score, or its blend with the env reward when the run combines them). "
                  "Whether it reached training: `review.trained_reward`.")
    effective_reward = serializers.FloatField(read_only=True, allow_null=True, help_text="The same as `reward`.")
    rank = serializers.IntegerField(read_only=True, help_text="1 = the best `reward` in its group: follows human "
                                                              "scores and reorders, not the judge's order.")
    judge_score = serializers.FloatField(read_only=True, allow_null=True,
                                         help_text="The judge's score, kept as the judge gave it after any override.")
    override_score = serializers.FloatField(read_only=True, allow_null=True,
                                            help_text="The human score (null: none); `reward` follows it.")
    explanation = serializers.SerializerMethodField(help_text="The judge's explanation, its numbering translated "
                                                              "to the labels.")
    review = serializers.SerializerMethodField()

    class Meta:
        model = Trajectory
        fields = ["id", "index", "label", "rank", "env_reward", "judge_score", "explanation", "criteria", "reward",
                  "override_score", "effective_reward", "advantage", "error", "completion_tokens", "review", "role",
                  "episode"]
        read_only_fields = ["role", "episode"]

    def get_explanation(self, obj: Trajectory) -> str:
        from webapp.selectors.rewards import explanation_for_people

        return explanation_for_people(text=obj.explanation, trajectories=list(obj.group.trajectories.all()))

    @extend_schema_field(RewardViewSerializer)
    def get_review(self, obj: Trajectory) -> dict:
        from webapp.selectors.rewards import trajectory_reward

        return trajectory_reward(trajectory=obj)


class TrajectorySerializer(TrajectorySummarySerializer):
    class Meta(TrajectorySummarySerializer.Meta):
        fields = TrajectorySummarySerializer.Meta.fields + ["group", "messages", "tools", "metadata",
                                                            "rubric_version", "judge_model"]


class GroupSerializer(serializers.ModelSerializer):
    trajectories = TrajectorySummarySerializer(many=True, read_only=True)
    reward_mean = serializers.FloatField(read_only=True, allow_null=True, help_text=(
        "Mean of the trajectories' `reward` (human scores where given): what the step trains on. Trajectory "
        "ranks follow the same rewards."))
    reward_std = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = TrajectoryGroup
        fields = ["id", "run", "step_index", "index", "scenario_external_id", "role", "reward_mean", "reward_std",
                  "skipped", "errors", "scoring_error", "trajectories", "created_at"]


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = ["id", "step_index", "adapter_name", "created_at"]


class OverrideSerializer(serializers.Serializer):
    score = serializers.FloatField(allow_null=True, help_text="0..1; null removes the override.")
    reason = serializers.CharField(max_length=2000)


class ReorderSerializer(serializers.Serializer):
    order = serializers.ListField(child=serializers.IntegerField(), help_text="Trajectory ids, best first.")
    reason = serializers.CharField(max_length=2000)


class ScoreOverrideSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", default=None, read_only=True)
    trajectory_label = serializers.SerializerMethodField()

    class Meta:
        model = ScoreOverride
        fields = ["id", "run", "trajectory", "group", "step_index", "group_index", "trajectory_index",
                  "trajectory_label", "kind",
                  "judge_score", "before", "after", "reason", "applies_to_training", "redo", "training",
                  "user", "created_at"]
        extra_kwargs = {"redo": {"help_text": "Set when the step was rolled out again and this row's group replaced: "
                                              "carried (to the new trajectory with the same answer; see the carried "
                                              "row) or discarded. Such a row never reached training."}}

    training = serializers.CharField(source="training_note", read_only=True,
                                     help_text="What the change did to training, as the pages say it.")

    def get_trajectory_label(self, obj: ScoreOverride) -> str:
        return trajectory_label(obj.trajectory_index)


class ForkSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=1, help_text="The checkpoint (step) of this run to start from.")
    name = serializers.CharField(max_length=100)
    rubric_version = serializers.IntegerField(required=False, allow_null=True)
    judge_config = serializers.IntegerField(required=False, allow_null=True)
    steps = serializers.IntegerField(min_value=1, max_value=100000, default=10)
    learning_rate = serializers.FloatField(min_value=1e-9, max_value=1.0, required=False, allow_null=True)
    review_gate = serializers.BooleanField(required=False, default=False)
    overrides = serializers.DictField(required=False, default=dict)


class AgreementSerializer(serializers.Serializer):
    pairwise = serializers.FloatField(allow_null=True)
    spearman = serializers.FloatField(allow_null=True)
    kendall_tau = serializers.FloatField(allow_null=True)
    groups = serializers.IntegerField()
    pairs = serializers.IntegerField()
    labels = serializers.IntegerField()


class StepAgreementSerializer(AgreementSerializer):
    step = serializers.IntegerField()


class RunAgreementSerializer(serializers.Serializer):
    overall = AgreementSerializer()
    steps = StepAgreementSerializer(many=True)


class QueueItemSerializer(serializers.Serializer):
    group = serializers.IntegerField(source="group.id")
    step = serializers.IntegerField(source="group.step_index")
    group_index = serializers.IntegerField(source="group.index")
    reasons = serializers.ListField(child=serializers.CharField())
    labelled = serializers.IntegerField()
    size = serializers.IntegerField()
    value = serializers.FloatField(help_text="Expected value of a review: the queue's order (docs/webapp.md).")
    pending = serializers.BooleanField(help_text="The group's step has not trained: a review changes training.")
    near_tie_gap = serializers.FloatField(allow_null=True, min_value=0.0, max_value=1.0, help_text=(
        "The smallest gap between two distinct judge scores of the group (null: fewer than two); it orders groups "
        "of equal value and flags nothing."))


class CompareColumnSerializer(serializers.Serializer):
    trajectory = TrajectorySummarySerializer()
    step = serializers.IntegerField(source="group.step_index")
    group = serializers.IntegerField(source="group.id")
    answer = serializers.CharField()
    diff = serializers.ListField(child=serializers.ListField(child=serializers.CharField()),
                                 help_text='[op, text] with op "same" | "ins" | "del", against the first column.')


class RescoreSerializer(serializers.ModelSerializer):
    criteria = CriterionSerializer(many=True, required=False)
    judge_model = serializers.CharField(required=False, allow_blank=True, max_length=300)
    temperature = serializers.FloatField(required=False, allow_null=True, min_value=0.0, max_value=2.0)
    passes = serializers.IntegerField(required=False, allow_null=True, min_value=1, max_value=10)
    rubric_text = serializers.CharField(max_length=PROMPT_MAX)
    group_ids = serializers.ListField(child=serializers.IntegerField(), min_length=1)

    class Meta:
        model = Rescore
        fields = ["id", "project", "base_version", "rubric_text", "criteria", "judge_config", "judge_model",
                  "temperature", "passes", "group_ids", "status", "results", "summary", "error", "saved_version",
                  "created_at", "finished_at"]
        read_only_fields = ["status", "results", "summary", "error", "saved_version", "created_at", "finished_at"]


class SaveVersionSerializer(serializers.Serializer):
    rubric = serializers.IntegerField(required=False, allow_null=True,
                                      help_text="Default: the rubric of the version the candidate was edited from.")
