"""Distillation pages: start a job (teacher, judge, rubric, answers per scenario, threshold), watch it, review
its drafts (each chosen answer rendered as a trajectory is, escaped; edit, drop, restore) and accept them into
the dataset's next version."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from webapp.dataset_forms import DistillationForm, DraftEditForm
from webapp.input_rules import whole_number
from webapp.models import Role
from webapp.models.datasets import Distillation, DistillationDraft
from webapp.selectors import access
from webapp.services import distillation as distillation_services
from webapp.views.common import handle_form


@login_required
def distillation_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    initial = {"agent": project.agents.first(), "scenario_set": project.scenario_sets.first(),
               "dataset": project.datasets.first(), "judge_config": project.judge_configs.first()}
    if request.GET.get("dataset", "").isdigit():
        chosen = project.datasets.filter(pk=whole_number(request.GET["dataset"], name="dataset")).first()
        initial["dataset"] = chosen or initial["dataset"]
    form = DistillationForm(request.POST or None, project=project, initial=initial)

    def save(data):
        job = distillation_services.distillation_create(user=request.user, project=project, **data)
        return redirect("distillation-detail", distillation_id=job.id)

    return handle_form(request, form, save, "webapp/form_page.html", {
        "project": project, "title": "Distil from a teacher",
        "note": "The teacher answers each training scenario several times; the judge ranks the answers against the "
                "rubric; the best one at or above the threshold becomes a draft. You review the drafts before they "
                "join the dataset."})


@login_required
@require_safe
def distillation_detail(request: HttpRequest, distillation_id: int) -> HttpResponse:
    job = access.in_project_get(user=request.user, model=Distillation, pk=distillation_id)
    role = access.project_role(user=request.user, project=job.project)
    drafts = list(job.drafts.order_by("index"))
    template = "webapp/partials/distillation_body.html" if getattr(request, "htmx", False) \
        else "webapp/distillation_detail.html"
    return render(request, template, {
        "project": job.project, "job": job, "drafts": drafts, "can_edit": role == Role.EDITOR,
        "reviewable": job.status in distillation_services.REVIEWABLE,
        "cancellable": job.status in distillation_services.CANCELLABLE,
        "pending": sum(d.status == DistillationDraft.Status.PENDING for d in drafts),
        "edit_forms": {d.id: DraftEditForm(initial={"messages": d.messages}) for d in drafts},
    })


@login_required
@require_POST
def distillation_draft(request: HttpRequest, draft_id: int) -> HttpResponse:
    draft = access.in_project_get(user=request.user, model=DistillationDraft, pk=draft_id,
                                  path="distillation__project", role=Role.EDITOR)
    action = request.POST.get("action", "")
    try:
        if action == "edit":
            form = DraftEditForm(request.POST)
            if not form.is_valid():
                raise ValidationError(form.errors["messages"])
            distillation_services.distillation_draft_update(user=request.user, draft=draft, action="edit",
                                                            messages=form.cleaned_data["messages"])
        else:
            distillation_services.distillation_draft_update(user=request.user, draft=draft, action=action)
    except ValidationError as err:
        messages.error(request, f"draft {draft.index + 1}: " + " ".join(err.messages))
    return redirect(reverse("distillation-detail", args=[draft.distillation_id]) + f"#draft-{draft.index}")


@login_required
@require_POST
def distillation_accept(request: HttpRequest, distillation_id: int) -> HttpResponse:
    job = access.in_project_get(user=request.user, model=Distillation, pk=distillation_id, role=Role.EDITOR)
    try:
        version = distillation_services.distillation_accept(user=request.user, distillation=job)
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
        return redirect("distillation-detail", distillation_id=job.id)
    messages.success(request, f"version {version.number}: {version.note}")
    return redirect("dataset-detail", dataset_id=job.dataset_id)


@login_required
@require_POST
def distillation_cancel(request: HttpRequest, distillation_id: int) -> HttpResponse:
    job = access.in_project_get(user=request.user, model=Distillation, pk=distillation_id, role=Role.EDITOR)
    try:
        distillation_services.distillation_cancel(user=request.user, distillation=job)
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
    return redirect("distillation-detail", distillation_id=job.id)
