from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from webapp import selectors
from webapp.forms import MemberForm, ProjectForm
from webapp.models import Role
from webapp.services.projects import membership_remove, membership_set, project_create
from webapp.views.common import handle_form


@login_required
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    context = {"projects": selectors.projects_for_user(user=request.user)}

    def save(data):
        project = project_create(owner=request.user, name=data["name"], description=data["description"])
        return redirect("project-detail", project_id=project.id)

    return handle_form(request, form, save, "webapp/project_list.html", context)


@login_required
@require_safe
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    project = selectors.project_get(user=request.user, project_id=project_id)
    role = selectors.project_role(user=request.user, project=project)
    return render(request, "webapp/project_detail.html", {
        "project": project, "role": role, "can_edit": role == Role.EDITOR,
        "runs": selectors.runs_for_project(project=project)[:50],
        "members": selectors.project_members(project=project), "member_form": MemberForm(),
        **selectors.catalogue_for_project(project=project),
    })


@login_required
@require_POST
def project_member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    project = selectors.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    form = MemberForm(request.POST)
    if form.is_valid():
        user = get_user_model().objects.filter(username=form.cleaned_data["username"]).first()
        if user is None:
            messages.error(request, f"no user named {form.cleaned_data['username']!r}")
        else:
            membership_set(project=project, user=user, role=form.cleaned_data["role"], acting_user=request.user)
            messages.success(request, f"{user.username} is now a {form.cleaned_data['role']}")
    else:
        messages.error(request, "give a username and a role")
    return redirect("project-detail", project_id=project.id)


@login_required
@require_POST
def project_member_remove(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    project = selectors.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        messages.error(request, "no such user")
        return redirect("project-detail", project_id=project.id)
    try:
        membership_remove(project=project, user=user, acting_user=request.user)
        messages.success(request, f"{user.username} is no longer a member")
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
    return redirect("project-detail", project_id=project.id)
