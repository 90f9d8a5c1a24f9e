from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST, require_safe

from webapp.selectors import access, catalogue as catalogue_selectors, datasets as dataset_selectors, runs as run_selectors
from webapp.forms import MemberForm, ProjectForm, apply_service_errors
from webapp.selectors import usage as usage_selectors
from webapp.selectors.queue import queue_settings
from webapp.models import Role
from webapp.services.projects import member_add, membership_remove, project_create, project_queue_priority_set
from webapp.wording import with_article
from webapp.views.common import handle_form
from webapp.views.guided_start import guided_context
from webapp.notifications.views import failing_webhooks


@login_required
def project_list(request: HttpRequest) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    context = {"projects": access.projects_for_user(user=request.user), **guided_context()}

    def save(data):
        project = project_create(owner=request.user, name=data["name"], description=data["description"])
        return redirect("project-detail", project_id=project.id)

    return handle_form(request, form, save, "webapp/project_list.html", context)


@login_required
@require_safe
def project_detail(request: HttpRequest, project_id: int) -> HttpResponse:
    return _project_page(request, project_id)


def _project_page(request: HttpRequest, project_id: int, member_form: MemberForm | None = None,
                  status: int = 200) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id)
    role = access.project_role(user=request.user, project=project)
    catalogue = catalogue_selectors.catalogue_for_project(project=project)
    runs = run_selectors.runs_for_project(project=project)[:50]
    # An empty project opens on the guided start (issue 48): nothing to choose from yet, so nothing else to do.
    empty = role == Role.EDITOR and not runs and not catalogue["agents"].exists()
    return render(request, "webapp/project_detail.html", {
        "project": project, "role": role, "can_edit": role == Role.EDITOR, **(guided_context() if empty else {}),
        "runs": runs,
        "members": access.project_members(project=project), "member_form": member_form or MemberForm(),
        **catalogue,
        "datasets": dataset_selectors.datasets_for_project(project=project),
        "usage": usage_selectors.project_usage(project=project),
        "failing_webhooks": failing_webhooks(project=project),
        "queue": queue_settings(project=project),  # the fair queue: this project's priority and cap
    }, status=status)


@login_required
@require_POST
def project_member_add(request: HttpRequest, project_id: int) -> HttpResponse:
    """Errors are shown beside the form (the page re-rendered, status 400), not in the message bar."""
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            membership, invite = member_add(project=project, acting_user=request.user, **form.cleaned_data)
        except ValidationError as err:
            apply_service_errors(form, err)
        else:
            if invite:
                messages.success(request, f"account {membership.user.username} created as {membership.role}; send "
                                          f"them this one-time link to set a password: "
                                          f"{request.build_absolute_uri(invite)}")
            else:
                messages.success(request, f"{membership.user.username} is now {with_article(membership.role)}")
            return redirect("project-detail", project_id=project.id)
    return _project_page(request, project_id, member_form=form, status=400)


class InviteAcceptView(auth_views.PasswordResetConfirmView):
    """The invite link: the new member sets a password (Django's one-time token, spent once a password is set)."""

    template_name = "registration/invite_accept.html"
    success_url = reverse_lazy("login")
    post_reset_login = False


@login_required
@require_POST
def project_queue_priority(request: HttpRequest, project_id: int) -> HttpResponse:
    """The owner's queue priority for the project's runs (webapp/queue_policy.py); refused beyond the site's bounds."""
    project = access.project_get(user=request.user, project_id=project_id)
    if request.user.pk != project.owner_id:  # before reading the value: a member who is not the owner learns nothing
        raise PermissionDenied("only the project's owner sets its queue priority")
    raw = request.POST.get("queue_priority", "").strip()
    try:
        if not raw.lstrip("-").isdigit() or len(raw) > 6:
            raise ValidationError(f"give the queue priority as a whole number, not {raw[:20]!r}")
        project_queue_priority_set(user=request.user, project=project, priority=int(raw))
        messages.success(request, f"queue priority set to {int(raw)}")
    except ValidationError as err:
        messages.error(request, " ".join(err.messages))
    return redirect("project-detail", project_id=project.id)


@login_required
@require_POST
def project_member_remove(request: HttpRequest, project_id: int, user_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
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
