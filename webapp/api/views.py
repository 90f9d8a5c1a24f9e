"""The REST API (token or session auth): what the pages do, for scripts. Every queryset is limited to the
user's projects, so a non-member gets 404; writes go through the same services as the pages."""
from __future__ import annotations

from typing import Any, Callable

from django.conf import settings
from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.selectors import access, runs as run_selectors
from webapp.selectors.mcp import mcp_test_view
from webapp.api import serializers as s
from webapp.api.negotiation import JSON_ONLY
from webapp.api.pagination import query_int
from webapp.api.parsers import InputJSONParser
from webapp.api.review_views import GroupReviewActions, RescoreViewSet, RunReviewActions, TrajectoryReviewActions
from webapp.models import (
    Agent, DatasetVersion, JudgeConfig, McpServer, Project, Role, Rubric, RubricVersion, Run, ScenarioSet, Trajectory,
    TrajectoryGroup,
)
from webapp.services import catalogue as catalogue_services
from webapp.services import mcp_servers as mcp_services
from webapp.services import runs as run_services
from webapp.services.access import require_role
from webapp.services.projects import project_create


def _project(request: Request, project_id: int, role: str = Role.EDITOR) -> Project:
    return access.project_get(user=request.user, project_id=project_id, role=role)


def _picker(request: Request, data: dict):
    """pick(model, key, path): pops `key`'s id from a create body and returns that object if it is in one of the
    user's projects (404 otherwise), None when absent."""
    def pick(model, key: str, path: str = "project"):
        pk = data.pop(key, None)
        return None if pk is None else access.in_project_get(user=request.user, model=model, pk=pk, path=path)
    return pick


class _InProject(viewsets.GenericViewSet):
    project_path = "project"
    # The least role per action ("action" or "action:METHOD"), checked as soon as the object is looked up: a
    # member without it gets 403 before their body is even read, a non-member 404 (the queryset).
    action_roles: dict[str, str] = {}

    def get_queryset(self):
        return access.for_user(user=self.request.user, queryset=self.queryset.all(), path=self.project_path)

    def check_object_permissions(self, request: Request, obj) -> None:
        super().check_object_permissions(request, obj)
        role = self.action_roles.get(f"{self.action}:{request.method}") or self.action_roles.get(self.action or "")
        if role:
            project = obj
            for part in self.project_path.split("__"):
                project = getattr(project, part)
            require_role(user=request.user, project=project, role=role)


class _CreateByService(mixins.CreateModelMixin):
    """POST makes the object with its service, never the serializer: `create_service(user=, project=, **fields)`,
    the project looked up for the caller first (a 404 for a project they are not in)."""
    create_service: Callable[..., Any]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        project = _project(self.request, data.pop("project").id)
        serializer.instance = self.create_service(user=self.request.user, project=project, **data)


class _UpdateByService(mixins.UpdateModelMixin):
    """PUT/PATCH change the object with its service, `update_service(user=, <update_arg>=object, **fields)`; the
    project it belongs to stays as it is."""
    update_service: Callable[..., Any]
    update_arg: str

    def perform_update(self, serializer):
        data = {k: v for k, v in serializer.validated_data.items() if k != "project"}
        serializer.instance = self.update_service(user=self.request.user, **{self.update_arg: serializer.instance},
                                                  **data)


class _ProjectListMixin(mixins.ListModelMixin):
    """A list that `?project=` narrows to one project (a whole number of at least 1; a 400 naming it otherwise)."""

    @extend_schema(parameters=[OpenApiParameter("project", {"type": "integer", "minimum": 1},
                                                description="only this project's")])
    def list(self, request: Request, *args, **kwargs) -> Response:
        return super().list(request, *args, **kwargs)

    def get_queryset(self):
        qs = super().get_queryset()
        project = query_int(self.request, "project", minimum=1) if self.action == "list" else None
        return qs if project is None else qs.filter(project_id=project)


class ProjectViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, _InProject):
    serializer_class = s.ProjectSerializer
    queryset = Project.objects.all()
    project_path = "id"

    def get_queryset(self):
        return access.projects_for_user(user=self.request.user).order_by("id")

    def perform_create(self, serializer):
        serializer.instance = project_create(owner=self.request.user, **serializer.validated_data)


class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _CreateByService,
                   _UpdateByService, _InProject):
    serializer_class = s.AgentSerializer
    action_roles = {"update": Role.EDITOR, "partial_update": Role.EDITOR}
    queryset = Agent.objects.order_by("id")

    create_service = staticmethod(catalogue_services.agent_create)

    update_service, update_arg = staticmethod(catalogue_services.agent_update), "agent"


class ScenarioSetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _CreateByService, _InProject):
    serializer_class = s.ScenarioSetSerializer
    action_roles = {"scenarios:POST": Role.EDITOR, "upload": Role.EDITOR}
    queryset = ScenarioSet.objects.order_by("id")

    create_service = staticmethod(catalogue_services.scenario_set_create)

    @extend_schema(methods=["GET"], responses=s.ScenarioSerializer(many=True))
    @extend_schema(methods=["POST"], request=s.ScenarioSerializer, responses={201: s.ScenarioSerializer})
    @action(detail=True, methods=["get", "post"])
    def scenarios(self, request: Request, pk=None) -> Response:
        scenario_set = self.get_object()
        if request.method == "GET":
            page = self.paginate_queryset(scenario_set.scenarios.filter(retired=False).order_by("id"))
            return self.get_paginated_response(s.ScenarioSerializer(page, many=True).data)
        body = s.ScenarioSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        scenario = catalogue_services.scenario_create(user=request.user, scenario_set=scenario_set,
                                                      **body.validated_data)
        return Response(s.ScenarioSerializer(scenario).data, status=status.HTTP_201_CREATED)

    @extend_schema(request={"multipart/form-data": s.UploadSerializer}, responses={201: s.ScenarioSetSerializer})
    @action(detail=True, methods=["post"], parser_classes=[MultiPartParser, FormParser], **JSON_ONLY)
    def upload(self, request: Request, pk=None) -> Response:
        scenario_set = self.get_object()
        body = s.UploadSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        upload = body.validated_data["file"]
        catalogue_services.scenario_set_import(user=request.user, scenario_set=scenario_set,
                                               file_name=upload.name, data=upload.read(settings.STUDIO_MAX_UPLOAD_BYTES + 1))
        return Response(s.ScenarioSetSerializer(scenario_set).data, status=status.HTTP_201_CREATED)


class RubricViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _CreateByService, _InProject):
    serializer_class = s.RubricSerializer
    action_roles = {"versions": Role.EDITOR}
    queryset = Rubric.objects.order_by("id").prefetch_related(
        Prefetch("versions", queryset=RubricVersion.objects.order_by("number")))

    create_service = staticmethod(catalogue_services.rubric_create)

    @extend_schema(request=s.RubricVersionSerializer, responses={201: s.RubricVersionSerializer})
    @action(detail=True, methods=["post"], parser_classes=[InputJSONParser])
    def versions(self, request: Request, pk=None) -> Response:
        rubric = self.get_object()
        body = s.RubricVersionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = catalogue_services.rubric_version_create(user=request.user, rubric=rubric, **body.validated_data)
        return Response(s.RubricVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class JudgeConfigViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _CreateByService,
                         _UpdateByService, _InProject):
    serializer_class = s.JudgeConfigSerializer
    action_roles = {"update": Role.EDITOR, "partial_update": Role.EDITOR}
    queryset = JudgeConfig.objects.order_by("id")

    create_service = staticmethod(catalogue_services.judge_config_create)

    update_service, update_arg = staticmethod(catalogue_services.judge_config_update), "judge"


class McpServerViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _CreateByService,
                       _UpdateByService, mixins.DestroyModelMixin, _InProject):
    """Editors add, change and delete a project's MCP servers. A stdio server names an entry of the deployment's
    catalogue (`catalogue_entry`, GET /api/mcp-catalogue/); a `command`, `args`, `env` or `cwd` is refused (400,
    naming it). Header values are write-only, and dropped when the URL moves to another origin unless given
    again (`headers_dropped`). DELETE refuses (400, naming them) while agents use the server; runs already
    launched keep the spec they froze."""
    serializer_class = s.McpServerSerializer
    action_roles = {"update": Role.EDITOR, "partial_update": Role.EDITOR, "test": Role.EDITOR,
                    "destroy": Role.EDITOR}
    queryset = McpServer.objects.order_by("id")

    create_service = staticmethod(mcp_services.mcp_server_create)

    update_service, update_arg = staticmethod(mcp_services.mcp_server_update), "server"

    def perform_destroy(self, instance):
        mcp_services.mcp_server_delete(user=self.request.user, server=instance)

    @extend_schema(methods=["POST"], request=None, responses={202: s.McpConnectionTestSerializer})
    @extend_schema(methods=["GET"], responses=s.McpConnectionTestSerializer)
    @action(detail=True, methods=["get", "post"])
    def test(self, request: Request, pk=None) -> Response:
        """POST queues a connection test on a worker (202); GET reads it: poll while `status` is queued or
        running. `ok: false` with the named fault when the server could not be used."""
        server = self.get_object()
        if request.method == "POST":
            server = mcp_services.mcp_server_test_request(user=request.user, server=server)
        view = mcp_test_view(server=server)
        data = {**view, "error": view["error"] or "", "tools": server.tools if view["ok"] else []}
        return Response(s.McpConnectionTestSerializer(data).data,
                        status=202 if request.method == "POST" else 200)


class McpCatalogueView(APIView):
    """The stdio MCP servers of this deployment (STUDIO_MCP_STDIO_SERVERS), which a project's server may name.
    Site administrators keep the list; commands are not shown."""

    @extend_schema(responses=s.McpCatalogueEntrySerializer(many=True))
    def get(self, request: Request) -> Response:
        entries = mcp_services.mcp_catalogue_entries()
        return Response([{"name": name, "description": entry.description} for name, entry in sorted(entries.items())])


class RunViewSet(RunReviewActions, _ProjectListMixin, mixins.RetrieveModelMixin, _InProject):
    serializer_class = s.RunSerializer
    action_roles = {"pause": Role.EDITOR, "resume": Role.EDITOR, "cancel": Role.EDITOR, "fork": Role.EDITOR,
                    "approve": Role.REVIEWER}
    queryset = Run.objects.order_by("-id")

    def get_serializer_class(self):
        # the judge cost is a query per run: on the one run asked for, not on every run of a list
        return s.RunDetailSerializer if self.action == "retrieve" else s.RunSerializer

    @extend_schema(request=s.RunCreateSerializer, responses={201: s.RunSerializer})
    def create(self, request: Request) -> Response:
        body = s.RunCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        project = _project(request, data.pop("project"))
        pick = _picker(request, data)

        run = run_services.run_launch(  # review_gate, kind and sft pass through **data
            user=request.user, project=project, agent=pick(Agent, "agent"), scenario_set=pick(ScenarioSet, "scenario_set"),
            rubric_version=pick(RubricVersion, "rubric_version", "rubric__project"),
            judge_config=pick(JudgeConfig, "judge_config"),
            dataset_version=pick(DatasetVersion, "dataset_version", "dataset__project"), **data)
        return Response(s.RunSerializer(run).data, status=status.HTTP_201_CREATED)

    def _control(self, request: Request, service) -> Response:
        run = self.get_object()
        service(user=request.user, run=run)
        run.refresh_from_db()
        return Response(s.RunSerializer(run).data)

    @extend_schema(request=None, responses=s.RunSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk=None) -> Response:
        return self._control(request, run_services.run_pause)

    @extend_schema(request=None, responses=s.RunSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk=None) -> Response:
        return self._control(request, run_services.run_resume)

    @extend_schema(request=None, responses=s.RunSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk=None) -> Response:
        return self._control(request, run_services.run_cancel)

    @extend_schema(responses=s.StepSerializer(many=True))
    @action(detail=True, methods=["get"])
    def steps(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(run_selectors.run_steps(run=self.get_object()))
        return self.get_paginated_response(s.StepSerializer(page, many=True).data)

    @extend_schema(parameters=[OpenApiParameter("step", {"type": "integer", "minimum": 0},
                                                description="only this step's groups (0 or more)")],
                   responses=s.GroupSerializer(many=True))
    @action(detail=True, methods=["get"])
    def groups(self, request: Request, pk=None) -> Response:
        run = self.get_object()
        qs = run_selectors.run_groups(run=run, limit=None, step=query_int(request, "step"))
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(s.GroupSerializer(page, many=True).data)

    @extend_schema(responses=s.CheckpointSerializer(many=True))
    @action(detail=True, methods=["get"])
    def checkpoints(self, request: Request, pk=None) -> Response:
        page = self.paginate_queryset(self.get_object().checkpoints.order_by("step_index"))
        return self.get_paginated_response(s.CheckpointSerializer(page, many=True).data)


class GroupViewSet(GroupReviewActions, mixins.RetrieveModelMixin, _InProject):
    serializer_class = s.GroupSerializer
    action_roles = {"reorder": Role.REVIEWER}
    queryset = TrajectoryGroup.objects.prefetch_related("trajectories")
    project_path = "run__project"


class TrajectoryViewSet(TrajectoryReviewActions, mixins.RetrieveModelMixin, _InProject):
    serializer_class = s.TrajectorySerializer
    action_roles = {"override": Role.REVIEWER}
    queryset = Trajectory.objects.all()
    project_path = "group__run__project"


class PlaygroundViewSet(RescoreViewSet, _InProject):
    """Rubric-playground re-scores: create one (reviewers), poll it, save the candidate as a rubric version."""

    action_roles = {"save_version": Role.EDITOR}
