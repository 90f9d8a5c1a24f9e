"""A project's API tokens: every member sees the list (never a key); editors create one (its key shown once, on
the answer to the form) and revoke them."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from webapp.forms import ProjectTokenForm, apply_service_errors
from webapp.models import Role
from webapp.selectors import access
from webapp.selectors.external import project_tokens
from webapp.services.project_tokens import project_token_create, project_token_revoke


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def project_token_list(request: HttpRequest, project_id: int) -> HttpResponse:
    role = Role.EDITOR if request.method == "POST" else Role.VIEWER
    project = access.project_get(user=request.user, project_id=project_id, role=role)
    form = ProjectTokenForm(request.POST or None)
    new_key, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            try:
                _, new_key = project_token_create(user=request.user, project=project, name=form.cleaned_data["name"])
                form = ProjectTokenForm()
            except ValidationError as err:
                apply_service_errors(form, err)
        if new_key is None:
            status = 400
    return render(request, "webapp/project_tokens.html", {
        "project": project, "tokens": project_tokens(project=project), "form": form, "new_key": new_key,
        "can_edit": access.project_role(user=request.user, project=project) == Role.EDITOR,
        # The OpenAI clients' base URL of the project's served checkpoints (its chat/completions and models).
        "served_base_url": request.build_absolute_uri(
            reverse("api:project-openai-models", args=[project.id])).removesuffix("models"),
    }, status=status)


@login_required
@require_POST
def project_token_revoke_view(request: HttpRequest, project_id: int, token_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    token = get_object_or_404(project.tokens, pk=token_id)
    project_token_revoke(user=request.user, token=token)
    messages.success(request, f"The token {token.name!r} ({token.prefix}…) is revoked: it no longer works.")
    return redirect("project-tokens", project_id=project.id)
