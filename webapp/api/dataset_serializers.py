"""API shapes of datasets. Input types only; the services check roles and rows."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from webapp.models.datasets import Dataset, DatasetRow, DatasetVersion, Distillation, DistillationDraft


class DatasetVersionSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = DatasetVersion
        fields = ["id", "dataset", "number", "source", "note", "base", "row_count", "created_by", "created_at"]
        read_only_fields = fields


class DatasetSerializer(serializers.ModelSerializer):
    latest_version = serializers.SerializerMethodField()

    class Meta:
        model = Dataset
        fields = ["id", "project", "name", "description", "latest_version", "created_at"]
        read_only_fields = ["created_at"]
        validators = []  # uniqueness is the service's answer (same message as the page)

    @extend_schema_field(DatasetVersionSerializer(allow_null=True))
    def get_latest_version(self, obj: Dataset) -> dict | None:
        version = obj.latest_version
        return DatasetVersionSerializer(version).data if version else None


class DatasetRowSerializer(serializers.ModelSerializer):
    class Meta:
        model = DatasetRow
        fields = ["index", "messages", "tools", "metadata"]
        read_only_fields = fields


class DatasetUploadSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="JSONL, one conversation a line in the OpenAI chat format.")
    mode = serializers.ChoiceField(choices=["append", "replace"], default="append",
                                   help_text="append: the latest version's rows and the file's; replace: the file's.")
    model = serializers.CharField(required=False, allow_blank=True, default="", max_length=200,
                                  help_text="A model of the deployment's catalogue: each conversation must fit its "
                                            "context, counted with its tokenizer (400 naming the lines that do not).")


class DistillationSerializer(serializers.ModelSerializer):
    teacher_model = serializers.SerializerMethodField(help_text="The teacher's model, or the checkpoint's name.")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Distillation
        fields = ["id", "project", "dataset", "agent", "scenario_set", "teacher", "teacher_checkpoint", "teacher_model",
                  "judge_config", "rubric_version", "answers_per_scenario", "threshold", "max_scenarios", "status",
                  "summary", "error", "accepted_version", "created_by", "created_at", "finished_at"]
        read_only_fields = fields

    def get_teacher_model(self, obj: Distillation) -> str:
        return str((obj.config or {}).get("teacher", {}).get("model", ""))


class DistillationCreateSerializer(serializers.Serializer):
    """Ids of this project's objects (checked by the service); a judge entry or a checkpoint as the teacher."""
    project = serializers.IntegerField(min_value=1)
    dataset = serializers.IntegerField(min_value=1, help_text="The accepted drafts become its next version.")
    agent = serializers.IntegerField(min_value=1, help_text="The student agent: its prompt, environment, sampling.")
    scenario_set = serializers.IntegerField(min_value=1, help_text="Its training scenarios are asked.")
    teacher = serializers.IntegerField(min_value=1, required=False, allow_null=True,
                                       help_text="A judge entry as the teacher (or give teacher_checkpoint).")
    teacher_checkpoint = serializers.IntegerField(min_value=1, required=False, allow_null=True,
                                                  help_text="A checkpoint of this project as the teacher, served by "
                                                            "the project's inference server (or give teacher).")
    judge_config = serializers.IntegerField(min_value=1)
    rubric_version = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    answers_per_scenario = serializers.IntegerField(min_value=2, max_value=16, default=4)
    threshold = serializers.FloatField(min_value=0.0, max_value=1.0, default=0.5)
    max_scenarios = serializers.IntegerField(min_value=1, max_value=500, default=50)


class DistillationDraftSerializer(serializers.ModelSerializer):
    class Meta:
        model = DistillationDraft
        fields = ["id", "index", "scenario_external_id", "status", "messages", "tools", "candidates", "rewards",
                  "reward", "judge_score", "explanation", "reason"]
        read_only_fields = fields
