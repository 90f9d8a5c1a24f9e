"""The datasets API: list, create, upload a version (JSONL, checked row by row), read versions and their rows,
export a version as JSONL; distillation jobs (create, list, read, cancel, their drafts). Querysets are limited to
the user's projects (a non-member gets 404); writes go through the same services as the pages."""
from __future__ import annotations

from django.conf import settings
from django.http import StreamingHttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from webapp.api import dataset_serializers as ds
from webapp.api.negotiation import JSON_ONLY
from webapp.api.views import _CreateByService, _InProject, _picker, _project, _ProjectListMixin
from webapp.models import Agent, Checkpoint, JudgeConfig, Role, RubricVersion, ScenarioSet
from webapp.models.datasets import Dataset, DatasetVersion, Distillation
from webapp.selectors import datasets as dataset_selectors
from webapp.services import datasets as dataset_services
from webapp.services import distillation as distillation_services


class DatasetViewSet(_ProjectListMixin, mixins.RetrieveModelMixin, _CreateByService, _InProject):
    serializer_class = ds.DatasetSerializer
    action_roles = {"upload": Role.EDITOR}
    queryset = Dataset.objects.order_by("id")

    create_service = staticmethod(dataset_services.dataset_create)

    @extend_schema(request={"multipart/form-data": ds.DatasetUploadSerializer}, responses={201: ds.DatasetVersionSerializer})
    @action(detail=True, methods=["post"], parser_classes=[MultiPartParser, FormParser], **JSON_ONLY)
    def upload(self, request: Request, pk=None) -> Response:
        dataset = self.get_object()
        body = ds.DatasetUploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        upload = body.validated_data["file"]
        version = dataset_services.dataset_upload(
            user=request.user, dataset=dataset, file_name=upload.name, mode=body.validated_data["mode"],
            data=upload.read(settings.STUDIO_MAX_UPLOAD_BYTES + 1), model=body.validated_data["model"])
        return Response(ds.DatasetVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses=ds.DatasetVersionSerializer(many=True))
    @action(detail=True, methods=["get"])
    def versions(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(dataset_selectors.dataset_versions(dataset=self.get_object()))
        return self.get_paginated_response(ds.DatasetVersionSerializer(page, many=True).data)


class DatasetVersionViewSet(mixins.RetrieveModelMixin, _InProject):
    serializer_class = ds.DatasetVersionSerializer
    project_path = "dataset__project"
    queryset = DatasetVersion.objects.select_related("created_by").order_by("id")

    @extend_schema(responses=ds.DatasetRowSerializer(many=True))
    @action(detail=True, methods=["get"])
    def rows(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(self.get_object().rows.order_by("index"))
        return self.get_paginated_response(ds.DatasetRowSerializer(page, many=True).data)

    @extend_schema(responses={(200, "application/jsonl"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk=None) -> StreamingHttpResponse:
        version = self.get_object()
        response = StreamingHttpResponse(dataset_selectors.dataset_version_jsonl(version=version),
                                         content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=f"{version.dataset.name}-v{version.number}.jsonl")
        return response


class DistillationViewSet(_ProjectListMixin, mixins.RetrieveModelMixin, _InProject):
    """Distillation jobs: start one (editors; a judge entry or a checkpoint of the project as the teacher), list,
    read, cancel (editors), and read its drafts. Review and accept stay on the pages."""

    serializer_class = ds.DistillationSerializer
    action_roles = {"cancel": Role.EDITOR}
    queryset = Distillation.objects.select_related("created_by").order_by("-id")

    @extend_schema(request=ds.DistillationCreateSerializer, responses={201: ds.DistillationSerializer})
    def create(self, request: Request) -> Response:
        body = ds.DistillationCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        project = _project(request, data.pop("project"))
        pick = _picker(request, data)

        job = distillation_services.distillation_create(
            user=request.user, project=project, dataset=pick(Dataset, "dataset"), agent=pick(Agent, "agent"),
            scenario_set=pick(ScenarioSet, "scenario_set"), teacher=pick(JudgeConfig, "teacher"),
            teacher_checkpoint=pick(Checkpoint, "teacher_checkpoint", "run__project"),
            judge_config=pick(JudgeConfig, "judge_config"),
            rubric_version=pick(RubricVersion, "rubric_version", "rubric__project"), **data)
        return Response(ds.DistillationSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ds.DistillationSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk=None) -> Response:
        job = self.get_object()
        distillation_services.distillation_cancel(user=request.user, distillation=job)
        job.refresh_from_db()
        return Response(ds.DistillationSerializer(job).data)

    @extend_schema(responses=ds.DistillationDraftSerializer(many=True))
    @action(detail=True, methods=["get"])
    def drafts(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(self.get_object().drafts.order_by("index"))
        return self.get_paginated_response(ds.DistillationDraftSerializer(page, many=True).data)
