"""Review pages: side by side (a group, any picked trajectories, one scenario across steps), overrides and
reorders, the run's review page (gate, queue, agreement, audit trail), forks and the rubric playground."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST, require_safe

from webapp.input_rules import whole_number, whole_numbers
from webapp.selectors import access, review as review_selectors, rewards as reward_selectors, runs as run_selectors
from webapp.forms import ForkForm, OverrideForm, PlaygroundFilterForm, PlaygroundForm, ReorderForm
from webapp.models import Rescore, Role, RubricVersion, TrajectoryGroup
from webapp.selectors.catalogue import judges_default_first
from webapp.services import playground as playground_services
from webapp.services.judge_probe import judge_pick_working
from webapp.services import review as review_services
from webapp.services import runs as run_services
from webapp.views.common import handle_form


def _role_context(request: HttpRequest, project) -> dict:
    role = access.project_role(user=request.user, project=project)
    return {"can_review": role in (Role.REVIEWER, Role.EDITOR), "can_edit": role == Role.EDITOR}


def _back(request: HttpRequest, fallback: str) -> HttpResponse:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return redirect(target)
    return redirect(fallback)


@login_required
@require_safe
def group_detail(request: HttpRequest, group_id: int) -> HttpResponse:
    group = access.group_get(user=request.user, group_id=group_id)
    group = TrajectoryGroup.objects.select_related("run__project", "scenario").get(pk=group.pk)
    if getattr(request, "htmx", False):  # the run page's live card
        return render(request, "webapp/partials/group_card.html", {
            "group": group, "run": group.run, "rewards": reward_selectors.groups_view(run=group.run, groups=[group])})
    ids = whole_numbers([i for i in request.GET.getlist("t") if i.isdigit()], name="t") or list(
        group.trajectories.order_by("rank", "index").values_list("id", flat=True))
    return render(request, "webapp/compare.html", {
        "run": group.run, "project": group.run.project, "group": group,
        "scenario": reward_selectors.group_scenario(group=group),
        "columns": review_selectors.compare_columns(run=group.run, trajectory_ids=ids),
        "all_trajectories": group.trajectories.order_by("rank", "index"),
        **review_selectors.group_neighbours(group=group),
        "override_form": OverrideForm(), **_role_context(request, group.run.project),
        "redo_overrides": review_selectors.group_redo_overrides(group=group),
        "pending_overrides": review_selectors.run_pending_overrides(run=group.run),
    })


@login_required
@require_safe
def run_compare(request: HttpRequest, run_id: int) -> HttpResponse:
    """Any trajectories of a run, side by side: ?t=<id>&t=<id>…"""
    run = access.run_get(user=request.user, run_id=run_id)
    ids = whole_numbers([i for i in request.GET.getlist("t") if i.isdigit()], name="t")
    return render(request, "webapp/compare.html", {
        "run": run, "project": run.project, "columns": review_selectors.compare_columns(run=run, trajectory_ids=ids),
        "override_form": OverrideForm(), **_role_context(request, run.project)})


@login_required
@require_safe
def run_scenario(request: HttpRequest, run_id: int, scenario_id: str) -> HttpResponse:
    """One scenario across steps: by default the best answer of its first group beside that of its latest."""
    run = access.run_get(user=request.user, run_id=run_id)
    groups = list(review_selectors.scenario_steps(run=run, scenario_id=scenario_id))
    picked = [g for g in groups if str(g.step_index) in request.GET.getlist("step")]
    if picked:
        ids = [t for g in picked for t in g.trajectories.order_by("rank", "index").values_list("id", flat=True)[:1]]
    else:
        ids = review_selectors.scenario_default_pair(run=run, scenario_id=scenario_id)
    return render(request, "webapp/compare.html", {
        "run": run, "project": run.project, "scenario_id": scenario_id, "scenario_groups": groups,
        "picked_steps": {g.step_index for g in picked} or {groups[0].step_index, groups[-1].step_index},
        "columns": review_selectors.compare_columns(run=run, trajectory_ids=ids), "override_form": OverrideForm(),
        **_role_context(request, run.project)})


@login_required
@require_POST
def trajectory_override(request: HttpRequest, trajectory_id: int) -> HttpResponse:
    trajectory = access.trajectory_get(user=request.user, trajectory_id=trajectory_id, role=Role.REVIEWER)
    form = OverrideForm(request.POST)
    if form.is_valid():
        try:
            review_services.trajectory_override(user=request.user, trajectory=trajectory, **form.cleaned_data)
            messages.success(request, "score overridden" if form.cleaned_data["score"] is not None else "override removed")
        except ValidationError as err:
            messages.error(request, " ".join(err.messages))
    else:
        messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
    return _back(request, f"/groups/{trajectory.group_id}/")


@login_required
@require_POST
def group_reorder(request: HttpRequest, group_id: int) -> HttpResponse:
    group = access.group_get(user=request.user, group_id=group_id, role=Role.REVIEWER)
    form = ReorderForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError({"reason": ["say why you reorder the group"]})
        changes = review_services.group_reorder(user=request.user, group=group, order=form.order(request.POST),
                                                reason=form.cleaned_data["reason"])
        messages.success(request, f"group reordered ({len(changes)} score{'s' if len(changes) != 1 else ''} changed)")
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
    return _back(request, f"/groups/{group.id}/")


QUEUE_PAGE = 50  # queue rows per page of the Review page; the pager reaches every flagged group


@login_required
@require_safe
def run_review(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id)
    agreement = review_selectors.run_agreement(run=run)
    pending = run.groups.filter(step_index=run.steps_done + 1) if run.status == "awaiting_review" else None
    queue = review_selectors.review_queue(run=run)
    page = Paginator(queue, QUEUE_PAGE).get_page(request.GET.get("queue_page"))
    return render(request, "webapp/run_review.html", {
        "run": run, "project": run.project, "queue": page, "queue_summary": review_selectors.review_queue_summary(
            run=run, queue=queue), "agreement": agreement,
        "agreement_chart": {"steps": agreement["steps"]}, "overrides": review_selectors.run_overrides(run=run),
        "versions": review_selectors.project_agreement_by_version(project=run.project), "pending_groups": pending,
        **_role_context(request, run.project)})


@login_required
@require_POST
def run_approve(request: HttpRequest, run_id: int) -> HttpResponse:
    run = access.run_get(user=request.user, run_id=run_id, role=Role.REVIEWER)
    try:
        review_services.run_review_approve(user=request.user, run=run)
        messages.success(request, "review approved: the step trains on the reviewed scores")
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
    return _back(request, f"/runs/{run.id}/")


@login_required
def run_fork(request: HttpRequest, checkpoint_id: int) -> HttpResponse:
    checkpoint = access.checkpoint_get(user=request.user, checkpoint_id=checkpoint_id)
    parent = checkpoint.run
    access.project_get(user=request.user, project_id=parent.project_id, role=Role.EDITOR)
    reinforce = parent.kind == "sft"  # SFT → RL: the same fork, across kinds (a GRPO run from the adapter)
    initial = {"name": f"{parent.name}-{'rl' if reinforce else 'fork'}-{checkpoint.step_index}",
               "rubric_version": parent.rubric_version, "judge_config": parent.judge_config,
               "review_gate": parent.review_gate, "scenario_set": parent.scenario_set}
    form = ForkForm(request.POST or None, project=parent.project, initial=initial)

    def save(data):
        run = run_services.run_fork(user=request.user, checkpoint=checkpoint, **data)
        return redirect("run-detail", run_id=run.id)

    if reinforce:
        title = f"Reinforce from {parent.name} step {checkpoint.step_index} (GRPO)"
        note = ("A GRPO run whose adapter starts from this SFT checkpoint: it rolls out the scenario set's training "
                "scenarios with the parent's agent and LoRA shape, scored by the judge you choose (or the "
                "environment's reward).")
    else:
        title = f"Fork {parent.name} from step {checkpoint.step_index}"
        note = "The new run starts from this checkpoint's adapter, with the parent's agent and scenarios."
    return handle_form(request, form, save, "webapp/form_page.html",
                       {"project": parent.project, "title": title, "note": note})


@login_required
def playground(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id)
    filters = PlaygroundFilterForm(request.GET, project=project)
    chosen_filters = filters.filters()
    groups = review_selectors.playground_groups(project=project, **chosen_filters)
    picked = whole_numbers([g for g in request.GET.getlist("group") if g.isdigit()], name="group")
    initial: dict = {"groups": list(groups.values_list("id", flat=True)) if request.GET.get("all") else picked}
    # Defaults come from the run being re-scored (its rubric version and judge), else the project's newest
    # version and default judge: a re-score is a comparison with what that run was scored by.
    source = review_selectors.playground_source_run(project=project, run_id=chosen_filters.get("run_id"),
                                                    group_ids=initial["groups"])
    if request.GET.get("version", "").isdigit():
        version = access.in_project_get(user=request.user, model=RubricVersion,
                                        pk=whole_number(request.GET["version"], name="version"),
                                        path="rubric__project")
    elif source is not None and source.rubric_version is not None:
        version = source.rubric_version
    else:
        version = RubricVersion.objects.filter(rubric__project=project).order_by("-created_at", "-id").first()
    if version is not None:
        initial.update(base_version=version, text=version.text, criteria="\n".join(
            f"{c['name']} | {c['weight']:g} | {c['description']}" for c in version.criteria))
    initial["judge_config"] = (source.judge_config if source is not None and source.judge_config is not None
                               else judge_pick_working(judges=judges_default_first(project=project)))
    form = PlaygroundForm(request.POST or None, project=project, groups=groups, initial=initial)
    if request.method == "POST":
        access.project_get(user=request.user, project_id=project_id, role=Role.REVIEWER)

    def save(data):
        rescore = playground_services.playground_create(
            user=request.user, project=project, group_ids=[g.id for g in data["groups"]], rubric_text=data["text"],
            criteria=data["criteria"], judge_config=data["judge_config"], judge_model=data["judge_model"],
            temperature=data["temperature"], passes=data["passes"], base_version=data["base_version"])
        return redirect("playground-detail", rescore_id=rescore.id)

    return handle_form(request, form, save, "webapp/playground.html", {
        "project": project, "recent": project.rescores.select_related("created_by")[:10], "filters": filters,
        "filter_query": request.GET.urlencode(), "shown": groups.count(), "source_run": source,
        **_role_context(request, project)})


@login_required
@require_safe
def playground_detail(request: HttpRequest, rescore_id: int) -> HttpResponse:
    rescore = access.in_project_get(user=request.user, model=Rescore, pk=rescore_id)
    context = {"rescore": rescore, "project": rescore.project, **_role_context(request, rescore.project),
               "rubrics": rescore.project.rubrics.all(),
               "launch_query": review_selectors.rescore_launch_query(rescore=rescore)}
    if getattr(request, "htmx", False):
        return render(request, "webapp/partials/rescore_results.html", context)
    return render(request, "webapp/playground_detail.html", context)


@login_required
@require_POST
def playground_save(request: HttpRequest, rescore_id: int) -> HttpResponse:
    rescore = access.in_project_get(user=request.user, model=Rescore, pk=rescore_id, role=Role.EDITOR)
    rubric = None
    if request.POST.get("rubric", "").isdigit():
        rubric = rescore.project.rubrics.filter(pk=whole_number(request.POST["rubric"], name="rubric")).first()
    try:
        version = playground_services.playground_save_version(user=request.user, rescore=rescore, rubric=rubric,
                                                              new_rubric=request.POST.get("rubric") == "new")
        messages.success(request, f"saved as {version}")
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
    return redirect("playground-detail", rescore_id=rescore.id)


@login_required
@require_safe
def runs_compare(request: HttpRequest, project_id: int) -> HttpResponse:
    """Several runs' reward and agreement curves overlaid: ?run=<id>&run=<id>…"""
    project = access.project_get(user=request.user, project_id=project_id)
    picked = whole_numbers([i for i in request.GET.getlist("run") if i.isdigit()], name="run")
    series = review_selectors.runs_overlay(project=project, run_ids=picked)
    return render(request, "webapp/runs_compare.html", {
        "project": project, "runs": run_selectors.runs_for_project(project=project)[:100], "picked": set(picked),
        "series": series, "has_points": any(s["reward"] or s["agreement"] for s in series)})


@login_required
@require_safe
def run_export(request: HttpRequest, run_id: int) -> HttpResponse:
    """Scored groups as JSONL for `python -m judging score` (?step=N for one step)."""
    run = access.run_get(user=request.user, run_id=run_id)
    step = whole_number(request.GET["step"], name="step") if request.GET.get("step", "").isdigit() else None
    response = StreamingHttpResponse(review_selectors.run_groups_jsonl(run=run, step=step),
                                     content_type="application/jsonl")
    response["Content-Disposition"] = f'attachment; filename="{run.config.get("name", "run")}-groups.jsonl"'
    return response
