from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.authtoken.views import obtain_auth_token
from rest_framework.routers import DefaultRouter

from webapp.api import external_views, views

app_name = "api"  # the router's names (run-detail, …) must not shadow the pages'
router = DefaultRouter()
router.register("projects", views.ProjectViewSet, basename="project")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("scenario-sets", views.ScenarioSetViewSet, basename="scenario-set")
router.register("rubrics", views.RubricViewSet, basename="rubric")
router.register("judge-configs", views.JudgeConfigViewSet, basename="judge-config")
router.register("runs", views.RunViewSet, basename="run")
router.register("groups", views.GroupViewSet, basename="group")
router.register("trajectories", views.TrajectoryViewSet, basename="trajectory")
router.register("playground", views.PlaygroundViewSet, basename="playground")

urlpatterns = [
    path("token/", obtain_auth_token, name="api-token"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI from this server's files (drf-spectacular-sidecar), its start-up script a file of its own (the
    # split view), so the site's CSP (no inline script) holds on this page too.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:api-schema", template_name="webapp/api_docs.html"),
         name="api-docs"),
    # External rollouts (issue 21): before the router's run routes, which would read "rollouts" as an action.
    path("runs/<int:pk>/rollouts/", external_views.RolloutsView.as_view(), name="run-rollouts"),
    path("runs/<int:pk>/rollouts/groups/", external_views.RolloutGroupsView.as_view(), name="run-rollouts-groups"),
    path("runs/<int:pk>/openai/v1/chat/completions", external_views.OpenAIChatView.as_view(),
         name="run-openai-chat"),
    path("runs/<int:pk>/openai/v1/models", external_views.OpenAIModelsView.as_view(), name="run-openai-models"),
    *router.urls,
]
