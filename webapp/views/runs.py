"""Run pages: launch, list, the live detail page and its fragments, controls, trajectories, checkpoints."""
from __future__ import annotations

from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_POST, require_safe

from training.fixtures.examples import EXAMPLES
from webapp.input_rules import whole_number
from webapp.selectors import access, review as review_selectors, rewards as reward_selectors, runs as run_selectors
from webapp.selectors import queue as queue_selectors
from webapp.selectors.evaluation import run_evaluation_data
from webapp.selectors.retention import run_retention_view
from webapp.selectors.external import external_calls_jsonl, external_panel, is_external
from webapp.forms import GroupSearchForm
from webapp.launch_forms import LaunchForm
from webapp.models import Role
from webapp.review_state import status_label
from webapp.services import gpu_plans, runs as run_services
from webapp.services.checkpoints import checkpoint_zip_chunks
from webapp.views.common import handle_form

GROUPS_PER_PAGE = 20
STEP_ROWS = 100  # the step table's newest rows; rendering thousands would cost the page seconds


@login_required
@require_safe
def run_list(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id)
    template = "webapp/partials/run_rows.html" if getattr(request, "htmx", False) else "webapp/run_list.html"
    q = request.GET.get("q", "")[:100]
    runs = queue_selectors.runs_explain_queue(runs=run_selectors.runs_for_project(project=project, search=q)[:200])
    return render(request, template, {"project": project, "q": q, "runs": runs})


@login_required
def run_launch(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    initial = {"name": f"run-{project.runs.count() + 1}", "agent": project.agents.first(),
               "scenario_set": project.scenario_sets.first()}
    # "Launch a run with it" from the playground names the rubric, judge, agent and scenarios it used.
    for field, objects in (("rubric", project.rubrics), ("judge_config", project.judge_configs),
                           ("agent", project.agents), ("scenario_set", project.scenario_sets),
                           ("dataset", project.datasets)):  # "Teach from it" on a dataset's page
        if request.GET.get(field, "").isdigit() and (
                chosen := objects.filter(pk=whole_number(request.GET[field], name=field)).first()):
            initial[field] = chosen
    if "dataset" in initial:
        initial["kind"] = "sft"
    elif (example := EXAMPLES.get(request.GET.get("example", ""))) is not None:  # "New agent from an example"
        initial.update(example.recipe)  # the settings it learns with (training/fixtures/examples.py)
    form = LaunchForm(request.POST or None, project=project, initial=initial)

    def save(_cleaned):
        data = form.launch_arguments()
        rubric, version = data.pop("rubric"), data.pop("rubric_version")
        try:
            run = run_services.run_launch(user=request.user, project=project,
                                          rubric_version=version or (rubric.latest_version if rubric else None),
                                          refuse_duplicate=request.POST.get("launch_anyway") != "1", **data)
        except run_services.DuplicateLaunch as twin:  # e.g. Back, then Launch: say so, link it, offer to go on
            return render(request, "webapp/run_launch.html",
                          {"project": project, "form": form, "duplicate": twin.run}, status=409)
        return redirect("run-detail", run_id=run.id)

    agent = form.cleaned_data.get("agent") if form.is_bound and form.is_valid() else initial.get("agent")
    plan = gpu_plans.agent_memory_plan_preview(agent=agent)
    return handle_form(request, form, save, "webapp/run_launch.html",
                       {"project": project, "memory_plan": plan and {**plan, "agent": agent.name}})


def _run_context(request: HttpRequest, run) -> dict:
    role = access.project_role(user=request.user, project=run.project)
    queue_selectors.runs_explain_queue(runs=[run])  # a queued run says what it waits for
    return {"run": run, "project": run.project, "can_control": role == Role.EDITOR,
            "can_review": role in (Role.REVIEWER, Role.EDITOR), "cost": run_selectors.run_judge_cost(run=run),
            "last_checkpoint": run.checkpoints.order_by("-step_index").first(), "is_external": is_external(run),
            "events_summarized": run_selectors.run_events_summarized(run=run),
            "pending_overrides": review_selectors.run_pending_overrides(run=run),
            "status_label": status_label(run),  # "Pausing" until the engine reached its boundary
            "memory_plan": run_selectors.run_memory_plan(run=run)}


@login_required
@require_safe
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id)
    search_form = GroupSearchForm(request.GET or None)
    search = search_form.search()
    groups = list(run_selectors.run_groups(run=run, limit=GROUPS_PER_PAGE, search=search))
    return render(request, "webapp/run_detail.html", {
        **_run_context(request, run), **_steps(run), "groups": groups,
        "search_form": search_form, "search": search, "search_query": request.GET.urlencode(),
        "more_groups": run_selectors.run_group_count(run=run, search=search) > len(groups), "next_offset": len(groups),
        "groups_page": GROUPS_PER_PAGE,  # live, the list keeps a page of the newest (run.js)
        "rewards": reward_selectors.groups_view(run=run, groups=groups),
        "checkpoints": run.checkpoints.order_by("step_index"), "chart": run_selectors.run_chart_data(run=run),
        "retention": run_retention_view(run=run),  # what the checkpoint policy keeps and why
        "settings": run_selectors.run_settings(run=run),
        "last_seq": run.last_event_seq,
        "evaluation": run_evaluation_data(run=run),  # held-out win rate, monitors, checkpoint table
        "ext": external_panel(run=run) if is_external(run) else None,  # an agent in the user's own code
    })


@login_required
@require_safe
def run_external(request: HttpRequest, run_id: int) -> HttpResponse:
    """The external agent's panel, re-fetched live (a group submitted, a client connected, a step opened)."""
    run = access.run_get(user=request.user, run_id=run_id)
    if not is_external(run):
        raise Http404("this run's agent does not roll out in your own code")
    return render(request, "webapp/partials/external_panel.html", {"run": run, "ext": external_panel(run=run)})


@login_required
@require_safe
def run_external_calls(request: HttpRequest, run_id: int) -> HttpResponse:
    """The calls recorded through the run's endpoint, as JSONL (kept STUDIO_EXTERNAL_CALLS_KEEP_DAYS after the run
    ends)."""
    run = access.run_get(user=request.user, run_id=run_id)
    if not is_external(run):
        raise Http404("this run's agent does not roll out in your own code")
    response = StreamingHttpResponse(external_calls_jsonl(run=run), content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{run.config.get("name", "run")}-calls.jsonl"'
    return response


@login_required
@require_safe
def run_header(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id)
    return render(request, "webapp/partials/run_header.html", _run_context(request, run))


@login_required
@require_safe
def run_steps(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id)
    return render(request, "webapp/partials/step_table.html", {"run": run, **_steps(run)})


def _steps(run) -> dict:
    return {"steps": run_selectors.run_recent_steps(run=run, limit=STEP_ROWS), "steps_total": run.steps.count()}


@login_required
@require_safe
def run_checkpoints(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id)
    return render(request, "webapp/partials/checkpoints.html",
                  {**_run_context(request, run), "checkpoints": run.checkpoints.order_by("step_index"),
                   "retention": run_retention_view(run=run)})


@login_required
@require_safe
def run_checkpoint_table(request: HttpRequest, run_id: int) -> HttpResponse:
    """The checkpoints-by-win-rate table, re-fetched live when a checkpoint or an evaluation arrives."""
    run = access.run_get(user=request.user, run_id=run_id)
    return render(request, "webapp/partials/checkpoint_table.html",
                  {**_run_context(request, run), "evaluation": run_evaluation_data(run=run)})


@login_required
@require_safe
def run_groups(request: HttpRequest, run_id: int) -> HttpResponse:
    """More groups, for the page's "older groups" button (newest first, bounded)."""
    run = access.run_get(user=request.user, run_id=run_id)
    raw = request.GET.get("offset", "0")
    offset = whole_number(raw, name="offset") if raw.strip().isdigit() else 0
    search_form = GroupSearchForm(request.GET)
    search = search_form.search()
    groups = list(run_selectors.run_groups(run=run, limit=GROUPS_PER_PAGE, offset=offset, search=search))
    query = request.GET.copy()
    query.pop("offset", None)
    return render(request, "webapp/partials/group_list.html", {
        "run": run, "groups": groups, "next_offset": offset + len(groups), "search_query": query.urlencode(),
        "rewards": reward_selectors.groups_view(run=run, groups=groups),
        "more_groups": run_selectors.run_group_count(run=run, search=search) > offset + len(groups)})


@login_required
@require_POST
def run_control(request: HttpRequest, run_id: int, action: str) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id, role=Role.EDITOR)
    control = {"pause": run_services.run_pause, "resume": run_services.run_resume, "cancel": run_services.run_cancel}
    if action not in control:
        raise Http404("no such action")
    refused = ""
    try:
        control[action](user=request.user, run=run)
    except ValidationError as err:
        refused = " ".join(err.messages)
    if getattr(request, "htmx", False):
        # The new header, rendered here: run_header answers GET only, and a POST handed to it was a 405.
        run.refresh_from_db()
        return render(request, "webapp/partials/run_header.html", {**_run_context(request, run),
                                                                     "control_error": refused})
    if refused:
        messages.error(request, refused)
    return redirect("run-detail", run_id=run.id)


@login_required
@require_safe
def trajectory_detail(request: HttpRequest, trajectory_id: int) -> HttpResponse:
    trajectory = access.trajectory_get(user=request.user, trajectory_id=trajectory_id)
    run = trajectory.group.run
    members = list(trajectory.group.trajectories.order_by("index"))
    return render(request, "webapp/trajectory_detail.html", {
        "trajectory": trajectory, "group": trajectory.group, "run": run, "project": run.project,
        "r": reward_selectors.trajectory_reward(trajectory=trajectory), "group_size": len(members),
        "explanation": reward_selectors.explanation_for_people(text=trajectory.explanation, trajectories=members),
        "history": trajectory.overrides.select_related("user").order_by("-id")[:20],
        "other_sides": review_selectors.trajectory_other_sides(trajectory=trajectory),
    })


@login_required
@require_safe
def checkpoint_download(request: HttpRequest, checkpoint_id: int) -> HttpResponse:
    checkpoint = access.checkpoint_get(user=request.user, checkpoint_id=checkpoint_id)
    root = Path(checkpoint.path)
    if not root.is_dir():
        raise Http404("the checkpoint's files are not on this machine")
    name = f"{checkpoint.run.config.get('name', 'run')}-step{checkpoint.step_index:04d}.zip"
    response = StreamingHttpResponse(checkpoint_zip_chunks(root=root), content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=name)
    return response
