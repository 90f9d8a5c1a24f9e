from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from webapp.api import dataset_views, external_views, serving_views, views
from webapp.api.token_views import TokenView

app_name = "api"  # the router's names (run-detail, …) must not shadow the pages'
router = DefaultRouter()
router.register("projects", views.ProjectViewSet, basename="project")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("scenario-sets", views.ScenarioSetViewSet, basename="scenario-set")
router.register("rubrics", views.RubricViewSet, basename="rubric")
router.register("judge-configs", views.JudgeConfigViewSet, basename="judge-config")
router.register("mcp-servers", views.McpServerViewSet, basename="mcp-server")
router.register("runs", views.RunViewSet, basename="run")
router.register("groups", views.GroupViewSet, basename="group")
router.register("trajectories", views.TrajectoryViewSet, basename="trajectory")
router.register("playground", views.PlaygroundViewSet, basename="playground")
router.register("datasets", dataset_views.DatasetViewSet, basename="dataset")
router.register("dataset-versions", dataset_views.DatasetVersionViewSet, basename="dataset-version")
router.register("distillations", dataset_views.DistillationViewSet, basename="distillation")

urlpatterns = [
    path("token/", TokenView.as_view(), name="api-token"),  # a password for a token, behind the login limits
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI from this server's files (drf-spectacular-sidecar), its start-up script a file of its own (the
    # split view), so the site's CSP (no inline script) holds on this page too.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:api-schema", template_name="webapp/api_docs.html"),
         name="api-docs"),
    # External rollouts (issue 21): before the router's run routes, which would read "rollouts" as an action.
    path("runs/<int:pk>/rollouts/", external_views.RolloutsView.as_view(), name="run-rollouts"),
    path("runs/<int:pk>/rollouts/groups/", external_views.RolloutGroupsView.as_view(), name="run-rollouts-groups"),
    # The run's OpenAI-compatible endpoint: asynchronous views (a call may wait minutes on the run's server).
    path("runs/<int:pk>/openai/v1/chat/completions", external_views.openai_chat_completions, name="run-openai-chat"),
    path("runs/<int:pk>/openai/v1/models", external_views.openai_models, name="run-openai-models"),
    # Checkpoints served after their run (issue 37), by the project's on-demand inference server.
    path("checkpoints/<int:pk>/openai/v1/chat/completions", serving_views.checkpoint_chat_completions,
         name="checkpoint-openai-chat"),
    path("checkpoints/<int:pk>/openai/v1/models", serving_views.checkpoint_models, name="checkpoint-openai-models"),
    path("projects/<int:pk>/openai/v1/chat/completions", serving_views.project_chat_completions,
         name="project-openai-chat"),
    path("projects/<int:pk>/openai/v1/models", serving_views.project_models, name="project-openai-models"),
    # The stdio MCP servers a project's server may name (the deployment's catalogue, no commands shown).
    path("mcp-catalogue/", views.McpCatalogueView.as_view(), name="mcp-catalogue"),
    *router.urls,
]
