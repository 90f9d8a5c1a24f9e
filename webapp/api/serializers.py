"""API shapes. Serializers validate input types only; every write is done by a service in the views."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.models import (
    Agent, Checkpoint, Rescore, ScoreOverride, JudgeConfig, McpServer, Project, Rubric, RubricVersion, Run, Scenario, ScenarioSet, Step, Trajectory,
    TrajectoryGroup,
)
from webapp.models.catalogue import MESSAGE_MAX, PROMPT_MAX
from webapp.models.runs import trajectory_label
from webapp.selectors.runs import run_judge_cost


class ProjectSerializer(serializers.ModelSerializer):
    class Meta:
        model = Project
        fields = ["id", "name", "description", "owner", "created_at"]
        read_only_fields = ["owner", "created_at"]


class AgentSerializer(serializers.ModelSerializer):
    system_prompt = serializers.CharField(required=False, allow_blank=True, max_length=PROMPT_MAX)

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
    name = serializers.CharField(max_length=50)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    weight = serializers.FloatField(required=False, default=1.0)


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

    class Meta:
        model = JudgeConfig
        fields = ["id", "project", "name", "model", "api_base", "api_key_env", "api_key", "clear_api_key",
                  "has_stored_key", "temperature", "passes", "concurrency", "budget_usd", "created_at"]
        read_only_fields = ["created_at"]
        validators = []


class McpServerSerializer(serializers.ModelSerializer):
    headers = serializers.DictField(child=serializers.CharField(max_length=2000), write_only=True, required=False,
                                    help_text="HTTP headers {name: value}: stored encrypted, never returned; "
                                              "a header left out keeps its stored value.")
    clear_headers = serializers.BooleanField(write_only=True, required=False, default=False)
    args = serializers.ListField(child=serializers.CharField(max_length=2000), required=False)
    env = serializers.DictField(child=serializers.CharField(max_length=2000), required=False)

    class Meta:
        model = McpServer
        fields = ["id", "project", "name", "transport", "command", "args", "env", "url", "headers", "clear_headers",
                  "header_names", "per_call_timeout_s", "max_result_chars", "max_concurrent_calls", "tools",
                  "tools_listed_at", "created_at"]
        read_only_fields = ["header_names", "tools", "tools_listed_at", "created_at"]
        validators = []


class McpConnectionTestSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    tools = serializers.ListField(child=serializers.DictField())
    error = serializers.CharField(help_text="The named fault (McpServerDidNotStart: …), empty when ok.")
    latency_s = serializers.FloatField()


class RunSerializer(serializers.ModelSerializer):
    uses_judge = serializers.BooleanField(read_only=True)

    class Meta:
        model = Run
        fields = ["id", "project", "name", "agent", "agent_version", "scenario_set", "rubric_version", "judge_config",
                  "config",
                  "review_gate", "reviewed_through_step", "parent_run", "parent_checkpoint", "status", "phase", "error", "cancel_requested", "total_steps", "steps_done", "uses_judge",
                  "worker", "heartbeat_at", "attempts", "created_at", "started_at", "finished_at"]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    """One run, with what its judge cost: calls really sent and their price, cache hits (free) apart."""

    judge_cost = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = RunSerializer.Meta.fields + ["judge_cost"]
        read_only_fields = fields

    def get_judge_cost(self, run: Run) -> dict[str, Any]:
        return run_judge_cost(run=run)


class RunCreateSerializer(serializers.Serializer):
    project = serializers.IntegerField()
    name = serializers.CharField(max_length=100)
    agent = serializers.IntegerField()
    scenario_set = serializers.IntegerField()
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
                  "override_score", "effective_reward", "advantage", "error", "completion_tokens", "review"]

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
        fields = ["id", "run", "step_index", "index", "scenario_external_id", "reward_mean", "reward_std", "skipped",
                  "errors", "scoring_error", "trajectories", "created_at"]


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
                  "judge_score", "before", "after", "reason", "applies_to_training", "user", "created_at"]

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
