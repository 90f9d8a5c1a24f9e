"""Catalogue pages: agents, scenario sets (form entry and upload), rubrics with versions, judges."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from django.urls import reverse

from webapp.selectors import access, catalogue as catalogue_selectors
from webapp.forms import (
    AgentForm, ExampleAgentForm, JudgeConfigForm, RubricForm, RubricVersionForm, ScenarioForm, ScenarioSetForm, ScenarioUploadForm,
    apply_service_errors,
)
from webapp.model_catalogue import BaseModelChoiceError, resolve_base_model
from webapp.models import Agent, JudgeConfig, Role, Rubric, Scenario, ScenarioSet
from webapp.services import catalogue as svc
from webapp.services import judge_probe
from webapp.views.common import handle_form, is_validation_request, validation_response

FORM_PAGE = "webapp/form_page.html"


def _editor_project(request: HttpRequest, project_id: int):
    return access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)


def _create_page(request: HttpRequest, project_id: int, form_class, create, title: str, then) -> HttpResponse:
    """A catalogue object's plain "New …" page: an editor's form, its service `create(user=, project=, **fields)`,
    then `then(made)`, the redirect. (The agent's and the judge's pages say more, so they stand on their own.)"""
    project = _editor_project(request, project_id)
    form = form_class(request.POST or None)

    def save(data):
        return then(create(user=request.user, project=project, **data))

    return handle_form(request, form, save, FORM_PAGE, {"project": project, "title": title})


@login_required
def agent_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _editor_project(request, project_id)
    form = AgentForm(request.POST or None, project=project)

    def save(data):
        svc.agent_create(user=request.user, project=project, **data)
        messages.success(request, f"agent {data['name']!r} created")
        return redirect("project-detail", project_id=project.id)

    return handle_form(request, form, save, FORM_PAGE, {"project": project, "title": "New agent",
                                                        "budget_url": _budget_url(project.id)})


@login_required
def agent_from_example(request: HttpRequest, project_id: int) -> HttpResponse:
    from training.fixtures.examples import EXAMPLES
    from webapp.services.examples import agent_from_example as create
    from webapp.services.examples import example_model_notes

    project = _editor_project(request, project_id)
    form = ExampleAgentForm(request.POST or None)

    def save(data):
        agent, scenario_set = create(user=request.user, project=project, **data)
        recipe = "; the settings it was measured to learn with" if EXAMPLES[data["example"]].recipe else ""
        messages.success(request, f"agent {agent.name!r} and scenario set {scenario_set.name!r} created: launch "
                                  f"a run with them (the game's own reward; no judge unless you choose one{recipe})")
        # Straight to the launch form with both chosen: a newcomer's next step, with the example's defaults.
        return redirect(f"{reverse('run-launch', args=[project.id])}?agent={agent.id}&scenario_set={scenario_set.id}"
                        f"&example={data['example']}")

    return handle_form(request, form, save, FORM_PAGE, {
        "project": project, "title": "New agent from an example",
        "note": " ".join(["The example's agent and a scenario set generated for it (docs/examples.md).",
                          *example_model_notes()])})


@login_required
def agent_edit(request: HttpRequest, agent_id: int) -> HttpResponse:
    agent = access.in_project_get(user=request.user, model=Agent, pk=agent_id, role=Role.EDITOR)
    form = AgentForm(request.POST, project=agent.project) if request.method == "POST" else AgentForm.from_agent(agent)
    if request.method != "POST":
        try:  # saved with a path before the deployment's catalogue: say so where it is fixed
            resolve_base_model(agent.base_model)
        except BaseModelChoiceError as err:
            messages.warning(request, f"base model: {err}")

    def save(data):
        svc.agent_update(user=request.user, agent=agent, **data)
        messages.success(request, "agent saved")
        return redirect("project-detail", project_id=agent.project_id)

    return handle_form(request, form, save, FORM_PAGE, {"project": agent.project, "title": f"Agent {agent.name}",
                                                        "budget_url": _budget_url(agent.project_id)})


def _budget_url(project_id: int) -> str | None:
    # Counting needs the model's files on this machine, as the launch check does; with it off, nothing to show.
    return reverse("agent-prompt-budget", args=[project_id]) if settings.STUDIO_MODEL_CHECK == "launch" else None


@login_required
@require_POST
def agent_prompt_budget(request: HttpRequest, project_id: int) -> HttpResponse:
    """The agent form's warning (htmx): how much of the model's context the prompt takes, and whether the longest
    scenario of each of the project's scenario sets still leaves room for max_tokens."""
    from webapp.budget_forms import PromptBudgetForm
    from webapp.selectors.prompt_budget import agent_prompt_budget as budget_of

    project = _editor_project(request, project_id)
    form = PromptBudgetForm(request.POST)
    if not form.is_valid() or settings.STUDIO_MODEL_CHECK != "launch":
        return render(request, "webapp/partials/prompt_budget.html", {"known": False})
    data = form.cleaned_data
    result = budget_of(project=project, base_model=data["base_model"], system_prompt=data["system_prompt"],
                       environment_kind=data["environment_kind"] or "chat",
                       environment_options=data["environment_options"], mcp_server_id=data["mcp_server"],
                       max_tokens=data["max_tokens"])
    return render(request, "webapp/partials/prompt_budget.html", {"known": True, **result})


@login_required
def scenario_set_create(request: HttpRequest, project_id: int) -> HttpResponse:
    return _create_page(request, project_id, ScenarioSetForm, svc.scenario_set_create, "New scenario set",
                        lambda made: redirect("scenario-set-detail", scenario_set_id=made.id))


@login_required
def scenario_set_detail(request: HttpRequest, scenario_set_id: int) -> HttpResponse:
    scenario_set = access.in_project_get(user=request.user, model=ScenarioSet, pk=scenario_set_id)
    role = access.project_role(user=request.user, project=scenario_set.project)
    scenario_form, upload_form, status = ScenarioForm(), ScenarioUploadForm(), 200
    if request.method == "POST":
        access.in_project_get(user=request.user, model=ScenarioSet, pk=scenario_set_id, role=Role.EDITOR)
        if "file" in request.FILES or request.POST.get("action") == "upload":
            upload_form = ScenarioUploadForm(request.POST, request.FILES)
            if upload_form.is_valid():
                upload = upload_form.cleaned_data["file"]
                try:
                    created = svc.scenario_set_import(user=request.user, scenario_set=scenario_set,
                                                      file_name=upload.name, data=upload.read(settings.STUDIO_MAX_UPLOAD_BYTES + 1))
                    messages.success(request, f"imported {len(created)} scenarios from {upload.name}")
                    return redirect("scenario-set-detail", scenario_set_id=scenario_set.id)
                except ValidationError as err:
                    apply_service_errors(upload_form, err)
            status = 400
        else:
            scenario_form = ScenarioForm(request.POST)
            if is_validation_request(request):
                return validation_response(request, scenario_form)
            if scenario_form.is_valid():
                try:
                    svc.scenario_create(user=request.user, scenario_set=scenario_set, **scenario_form.cleaned_data)
                    return redirect("scenario-set-detail", scenario_set_id=scenario_set.id)
                except ValidationError as err:
                    apply_service_errors(scenario_form, err)
            status = 400
    return render(request, "webapp/scenario_set_detail.html", {
        "project": scenario_set.project, "scenario_set": scenario_set, "can_edit": role == Role.EDITOR,
        "scenarios": scenario_set.scenarios.filter(retired=False).order_by("id")[:500],
        "count": scenario_set.scenarios.filter(retired=False).count(),
        "form": scenario_form, "upload_form": upload_form,
    }, status=status)


@login_required
def scenario_edit(request: HttpRequest, scenario_id: int) -> HttpResponse:
    scenario = access.in_project_get(user=request.user, model=Scenario, pk=scenario_id,
                                        path="scenario_set__project", role=Role.EDITOR)
    used = svc.scenario_runs(scenario=scenario)
    if request.method == "POST" and request.POST.get("action") == "delete":
        svc.scenario_delete(user=request.user, scenario=scenario)
        messages.success(request, f"scenario {scenario.external_id} " + (
            "retired: no new run gets it, the runs that used it keep it" if used else "deleted"))
        return redirect("scenario-set-detail", scenario_set_id=scenario.scenario_set_id)
    form = ScenarioForm(request.POST or None, initial={
        "external_id": scenario.external_id, "user_message": scenario.user_message, "context": scenario.context,
        "reference": scenario.reference, "split": scenario.split})

    def save(data):
        current = svc.scenario_update(user=request.user, scenario=scenario, **data)
        messages.success(request, f"scenario {current.external_id} saved" + (
            f" as version {current.version}; the runs that used version {scenario.version} keep it"
            if current.pk != scenario.pk else ""))
        return redirect("scenario-set-detail", scenario_set_id=scenario.scenario_set_id)

    return handle_form(request, form, save, "webapp/scenario_edit.html", {
        "project": scenario.scenario_set.project, "scenario": scenario, "used_by": used})


@login_required
def rubric_create(request: HttpRequest, project_id: int) -> HttpResponse:
    return _create_page(request, project_id, RubricForm, svc.rubric_create, "New rubric",
                        lambda made: redirect("rubric-detail", rubric_id=made.id))


@login_required
def rubric_detail(request: HttpRequest, rubric_id: int) -> HttpResponse:
    rubric = access.in_project_get(user=request.user, model=Rubric, pk=rubric_id)
    role = access.project_role(user=request.user, project=rubric.project)
    latest = rubric.latest_version
    initial = {"text": latest.text, "criteria": "\n".join(
        f"{c['name']} | {c['weight']:g} | {c['description']}" for c in latest.criteria)} if latest else {}
    form = RubricVersionForm(request.POST) if request.method == "POST" else RubricVersionForm(initial=initial)
    if request.method == "POST":
        access.in_project_get(user=request.user, model=Rubric, pk=rubric_id, role=Role.EDITOR)

    def save(data):
        version = svc.rubric_version_create(user=request.user, rubric=rubric, **data)
        messages.success(request, f"saved as version {version.number}")
        return redirect("rubric-detail", rubric_id=rubric.id)

    return handle_form(request, form, save, "webapp/rubric_detail.html", {
        "project": rubric.project, "rubric": rubric, "can_edit": role == Role.EDITOR,
        "versions": catalogue_selectors.rubric_versions(rubric=rubric),
        "diff": catalogue_selectors.rubric_version_diff(rubric=rubric, old=request.GET.get("old"),
                                                        new=request.GET.get("new")),
    })


@login_required
def judge_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = _editor_project(request, project_id)
    form = JudgeConfigForm(request.POST or None)

    def save(data):
        svc.judge_config_create(user=request.user, project=project, **data)
        messages.success(request, f"judge {data['name']!r} created")
        return redirect("project-detail", project_id=project.id)

    return handle_form(request, form, save, FORM_PAGE, {"project": project, "title": "New judge"})


@login_required
def judge_edit(request: HttpRequest, judge_id: int) -> HttpResponse:
    judge = access.in_project_get(user=request.user, model=JudgeConfig, pk=judge_id, role=Role.EDITOR)
    form = JudgeConfigForm(request.POST) if request.method == "POST" else JudgeConfigForm.from_judge(judge)

    def save(data):
        svc.judge_config_update(user=request.user, judge=judge, **data)
        messages.success(request, "judge saved")
        if getattr(judge, "key_dropped", False):
            messages.warning(request, "The API base or the model's provider changed: the stored API key was removed "
                                      "so that it is never sent there. Enter the key for the new destination.")
        return redirect("project-detail", project_id=judge.project_id)

    return handle_form(request, form, save, FORM_PAGE, {
        "project": judge.project, "title": f"Judge {judge.name}", "test_judge": judge,
        "note": ("An API key is stored (encrypted); it is never shown. Changing the API base or the model's "
                 "provider removes it unless you enter a key again here." if judge.has_stored_key else ""),
        "check_url": reverse("judge-check", args=[judge.id]),
    })


@login_required
@require_POST
def judge_test(request: HttpRequest, judge_id: int) -> HttpResponse:
    """One tiny real request to the saved judge: latency, cost and its reply, or why it failed."""
    judge = access.in_project_get(user=request.user, model=JudgeConfig, pk=judge_id, role=Role.EDITOR)
    result = judge_probe.judge_config_test(user=request.user, judge=judge)
    return render(request, "webapp/partials/judge_test.html", {"result": result, "judge": judge})
