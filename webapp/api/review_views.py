"""API for review: overrides and their audit trail, reorders, the review gate, the review queue, agreement,
side by side with a diff, forks and the rubric playground. Mixed into the viewsets of views.py, so every
object is looked up through the user's projects (a non-member gets 404) and every write is a service."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from webapp.selectors import access, review as review_selectors
from webapp.api import serializers as s
from webapp.api.parsers import InputJSONParser
from webapp.input_rules import INT_MAX, whole_numbers
from webapp.models import JudgeConfig, Rescore, Role, RubricVersion
from webapp.services import playground as playground_services
from webapp.services import review as review_services
from webapp.services import runs as run_services


class TrajectoryReviewActions:
    @extend_schema(request=s.OverrideSerializer, responses={201: s.ScoreOverrideSerializer})
    @action(detail=True, methods=["post"])
    def override(self, request: Request, pk=None) -> Response:
        trajectory = self.get_object()
        body = s.OverrideSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        record = review_services.trajectory_override(user=request.user, trajectory=trajectory, **body.validated_data)
        return Response(s.ScoreOverrideSerializer(record).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=s.ScoreOverrideSerializer(many=True))
    @action(detail=True, methods=["get"])
    def overrides(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(self.get_object().overrides.select_related("user", "run").order_by("-id"))
        return self.get_paginated_response(s.ScoreOverrideSerializer(page, many=True).data)


class GroupReviewActions:
    @extend_schema(request=s.ReorderSerializer, responses={201: s.ScoreOverrideSerializer(many=True)})
    @action(detail=True, methods=["post"], parser_classes=[InputJSONParser])  # `order` is a list: JSON only
    def reorder(self, request: Request, pk=None) -> Response:
        group = self.get_object()
        body = s.ReorderSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        records = review_services.group_reorder(user=request.user, group=group, **body.validated_data)
        return Response(s.ScoreOverrideSerializer(records, many=True).data, status=status.HTTP_201_CREATED)


class RunReviewActions:
    @extend_schema(request=None, responses=s.RunSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk=None) -> Response:
        return self._control(request, review_services.run_review_approve)

    @extend_schema(responses=s.ScoreOverrideSerializer(many=True))
    @action(detail=True, methods=["get"])
    def overrides(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(self.get_object().overrides.select_related("user", "run").order_by("-id"))
        return self.get_paginated_response(s.ScoreOverrideSerializer(page, many=True).data)

    @extend_schema(responses=s.QueueItemSerializer(many=True))
    @action(detail=True, methods=["get"], url_path="review-queue")
    def review_queue(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(review_selectors.review_queue(run=self.get_object()))
        return self.get_paginated_response(s.QueueItemSerializer(page, many=True).data)

    @extend_schema(responses=s.RunAgreementSerializer)
    @action(detail=True, methods=["get"])
    def agreement(self, request: Request, pk=None) -> Response:
        return Response(s.RunAgreementSerializer(review_selectors.run_agreement(run=self.get_object())).data)

    @extend_schema(parameters=[OpenApiParameter(
        "t", {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": INT_MAX}, "minItems": 1,
              "maxItems": 6},
        required=True, style="form", explode=True, description="trajectory ids, 1 to 6")],
                   responses=s.CompareColumnSerializer(many=True))
    @action(detail=True, methods=["get"])
    def compare(self, request: Request, pk=None) -> Response:
        ids = request.query_params.getlist("t")
        if not ids or len(ids) > 6 or not all(i.isdigit() for i in ids):
            raise ValidationError({"t": ["give 1 to 6 trajectory ids of this run, each a whole number"]})
        columns = review_selectors.compare_columns(run=self.get_object(), trajectory_ids=whole_numbers(ids, name="t"))
        return self.get_paginated_response(s.CompareColumnSerializer(self.paginate_queryset(columns), many=True).data)

    @extend_schema(request=s.ForkSerializer, responses={201: s.RunSerializer})
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk=None) -> Response:
        parent = self.get_object()
        body = s.ForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        access.project_get(user=request.user, project_id=parent.project_id, role=Role.EDITOR)
        checkpoint = parent.checkpoints.filter(step_index=data.pop("step")).first()
        if checkpoint is None:
            raise ValidationError({"step": ["this run has no checkpoint at that step"]})
        version_id, judge_id = data.pop("rubric_version", None), data.pop("judge_config", None)
        run = run_services.run_fork(
            user=request.user, checkpoint=checkpoint,
            rubric_version=None if version_id is None else access.in_project_get(
                user=request.user, model=RubricVersion, pk=version_id, path="rubric__project"),
            judge_config=None if judge_id is None else access.in_project_get(
                user=request.user, model=JudgeConfig, pk=judge_id), **data)
        return Response(s.RunSerializer(run).data, status=status.HTTP_201_CREATED)


class RescoreViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Mixed with the project-limited base viewset in views.py."""

    serializer_class = s.RescoreSerializer
    queryset = Rescore.objects.order_by("-id")

    @extend_schema(request=s.RescoreSerializer, responses={201: s.RescoreSerializer})
    def create(self, request: Request) -> Response:
        body = s.RescoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        project = access.project_get(user=request.user, project_id=data.pop("project").id)
        rescore = playground_services.playground_create(
            user=request.user, project=project, group_ids=data["group_ids"], rubric_text=data["rubric_text"],
            criteria=data.get("criteria"), judge_config=data["judge_config"], judge_model=data.get("judge_model", ""),
            temperature=data.get("temperature"), passes=data.get("passes"), base_version=data.get("base_version"))
        return Response(s.RescoreSerializer(rescore).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.SaveVersionSerializer, responses={201: s.RubricVersionSerializer})
    @action(detail=True, methods=["post"], url_path="save-version", parser_classes=[InputJSONParser])
    def save_version(self, request: Request, pk=None) -> Response:
        rescore = self.get_object()
        body = s.SaveVersionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        rubric_id = body.validated_data.get("rubric")
        rubric = None if rubric_id is None else rescore.project.rubrics.filter(pk=rubric_id).first()
        version = playground_services.playground_save_version(user=request.user, rescore=rescore, rubric=rubric)
        return Response(s.RubricVersionSerializer(version).data, status=status.HTTP_201_CREATED)
