"""Shapes of the external-rollouts API (issue 21): input types only; the checks against the run are the
service's (webapp/services/external.py)."""
from __future__ import annotations

from rest_framework import serializers

from webapp.models import RunStatus

ID_REGEX = r"^[A-Za-z0-9_.-]{1,64}$"


class ToolCallFunctionSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    arguments = serializers.JSONField(help_text="The arguments: a JSON string, or the object itself.")


class ToolCallSerializer(serializers.Serializer):
    id = serializers.CharField(required=False, allow_blank=True, max_length=200)
    type = serializers.ChoiceField(choices=["function"], required=False)
    function = ToolCallFunctionSerializer()


class SubmittedMessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant", "tool"])
    content = serializers.JSONField(required=False, allow_null=True,
                                    help_text="Text, or OpenAI content parts (their text parts are kept).")
    tool_calls = ToolCallSerializer(many=True, required=False)
    tool_call_id = serializers.CharField(required=False, allow_blank=True, max_length=200)
    name = serializers.CharField(required=False, allow_blank=True, max_length=200)


class SubmittedTrajectorySerializer(serializers.Serializer):
    id = serializers.RegexField(ID_REGEX, max_length=64, help_text="The trajectory id its calls were made with "
                                "(header X-Trajectory-Id): 1 to 64 letters, digits, '_', '.' or '-'.")
    messages = SubmittedMessageSerializer(many=True, required=False, help_text=(
        "The conversation; left out: the last recorded call's messages and answer. Every assistant turn must be "
        "an answer the model sampled for this trajectory (422 otherwise, unless the run allows it)."))
    reward = serializers.FloatField(required=False, allow_null=True,
                                    help_text="Your own reward (needed when the run has no judge).")
    metadata = serializers.DictField(required=False, help_text="Kept with the trajectory, shown on its page.")


class GroupSubmissionSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=1)
    group_index = serializers.IntegerField(min_value=0)
    trajectories = SubmittedTrajectorySerializer(many=True, allow_empty=False,
                                                 help_text="1 to the run's group size (413 above it).")


class GroupSubmittedSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    group_index = serializers.IntegerField()
    trajectories = serializers.IntegerField(help_text="How many trajectories were stored.")


class RolloutScenarioSerializer(serializers.Serializer):
    id = serializers.CharField()
    user_message = serializers.CharField(allow_blank=True)
    context = serializers.CharField(allow_null=True, allow_blank=True, required=False)
    metadata = serializers.DictField(required=False)


class RolloutGroupSerializer(serializers.Serializer):
    group_index = serializers.IntegerField()
    scenario = RolloutScenarioSerializer()
    submitted = serializers.BooleanField()


class RolloutsStateSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    step = serializers.IntegerField(allow_null=True, help_text="The step waiting for groups; null: none now.")
    model = serializers.CharField(allow_null=True, help_text="The adapter to sample the step with.")
    deadline_s = serializers.FloatField(allow_null=True, help_text="Seconds left for the step's groups "
                                        "(paused time not counted).")
    timeout_s = serializers.FloatField()
    on_missing = serializers.CharField()
    allow_unsampled = serializers.BooleanField()
    group_size = serializers.IntegerField()
    system_prompt = serializers.CharField(allow_blank=True)
    sampling = serializers.DictField()
    total_steps = serializers.IntegerField()
    openai_base_url = serializers.CharField(help_text="The run's OpenAI-compatible endpoint (ends in /v1).")
    groups = RolloutGroupSerializer(many=True)
