from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from webapp.ratelimit import LoginView
from webapp.views import account, catalogue, evaluation, judge_check, projects, review, runs, scenario_generator

urlpatterns = [
    path("login/", LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("invite/<uidb64>/<token>/", projects.InviteAcceptView.as_view(), name="invite-accept"),
    path("", projects.project_list, name="project-list"),
    path("projects/<int:project_id>/", projects.project_detail, name="project-detail"),
    path("projects/<int:project_id>/members/", projects.project_member_add, name="project-member-add"),
    path("projects/<int:project_id>/members/<int:user_id>/remove/", projects.project_member_remove,
         name="project-member-remove"),
    path("projects/<int:project_id>/agents/new/", catalogue.agent_create, name="agent-create"),
    path("agents/<int:agent_id>/", catalogue.agent_edit, name="agent-edit"),
    path("projects/<int:project_id>/scenario-sets/new/", catalogue.scenario_set_create, name="scenario-set-create"),
    path("scenario-sets/<int:scenario_set_id>/", catalogue.scenario_set_detail, name="scenario-set-detail"),
    path("scenarios/<int:scenario_id>/", catalogue.scenario_edit, name="scenario-edit"),
    path("scenario-sets/<int:scenario_set_id>/generate/", scenario_generator.scenario_set_generate,
         name="scenario-set-generate"),
    path("projects/<int:project_id>/rubrics/new/", catalogue.rubric_create, name="rubric-create"),
    path("rubrics/<int:rubric_id>/", catalogue.rubric_detail, name="rubric-detail"),
    path("projects/<int:project_id>/judges/new/", catalogue.judge_create, name="judge-create"),
    path("judges/<int:judge_id>/", catalogue.judge_edit, name="judge-edit"),
    path("judges/<int:judge_id>/test/", catalogue.judge_test, name="judge-test"),
    path("judges/<int:judge_id>/check/", judge_check.judge_check, name="judge-check"),
    path("projects/<int:project_id>/runs/", runs.run_list, name="run-list"),
    path("projects/<int:project_id>/runs/new/", runs.run_launch, name="run-launch"),
    path("projects/<int:project_id>/runs/compare/", review.runs_compare, name="runs-compare"),
    path("runs/<int:run_id>/", runs.run_detail, name="run-detail"),
    path("runs/<int:run_id>/header/", runs.run_header, name="run-header"),
    path("runs/<int:run_id>/steps/", runs.run_steps, name="run-steps"),
    path("runs/<int:run_id>/checkpoints/", runs.run_checkpoints, name="run-checkpoints"),
    path("checkpoints/<int:checkpoint_id>/evaluate/", evaluation.checkpoint_evaluate, name="checkpoint-evaluate"),
    path("runs/<int:run_id>/groups/", runs.run_groups, name="run-groups"),
    path("runs/<int:run_id>/review/", review.run_review, name="run-review"),
    path("runs/<int:run_id>/approve/", review.run_approve, name="run-approve"),
    path("runs/<int:run_id>/compare/", review.run_compare, name="run-compare"),
    path("runs/<int:run_id>/export.jsonl", review.run_export, name="run-export"),
    path("runs/<int:run_id>/scenarios/<path:scenario_id>/", review.run_scenario, name="run-scenario"),
    path("runs/<int:run_id>/<str:action>/", runs.run_control, name="run-control"),
    path("groups/<int:group_id>/", review.group_detail, name="group-detail"),
    path("groups/<int:group_id>/reorder/", review.group_reorder, name="group-reorder"),
    path("trajectories/<int:trajectory_id>/override/", review.trajectory_override, name="trajectory-override"),
    path("checkpoints/<int:checkpoint_id>/fork/", review.run_fork, name="run-fork"),
    path("projects/<int:project_id>/playground/", review.playground, name="playground"),
    path("playground/<int:rescore_id>/", review.playground_detail, name="playground-detail"),
    path("playground/<int:rescore_id>/save/", review.playground_save, name="playground-save"),
    path("trajectories/<int:trajectory_id>/", runs.trajectory_detail, name="trajectory-detail"),
    path("checkpoints/<int:checkpoint_id>/download/", runs.checkpoint_download, name="checkpoint-download"),
    path("account/api-token/", account.api_token, name="api-token"),
    path("docs/", RedirectView.as_view(pattern_name="api:api-docs", http_method_names=["get", "head"]), name="docs"),
    path("api/", include("webapp.api.urls")),
]
