"""Try it pages (issue 37): ask the base and checkpoints side by side, judge the answers, keep one as a scenario.
While a session is live its view comes over the page's socket (webapp/live/try_channel.py, issue 48), rendered
from the same context and template as this page, so what it shows live is what a reload shows; htmx polling of
the same template stands in while the socket is closed."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from webapp.forms import apply_service_errors
from webapp.input_rules import whole_number
from webapp.models import Role, TrySession
from webapp.selectors import access
from webapp.selectors.serving import try_session_view
from webapp.services import serving as serving_services
from webapp.services import trying as try_services
from webapp.try_forms import TryForm, TryJudgeForm, TrySaveForm
from webapp.views.common import handle_form


def _roles(request: HttpRequest, project) -> dict:
    return _user_roles(request.user, project)


def _user_roles(user, project) -> dict:
    role = access.project_role(user=user, project=project)
    return {"can_edit": role == Role.EDITOR, "can_review": role in (Role.REVIEWER, Role.EDITOR)}


@login_required
def try_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id)
    agent = project.agents.filter(pk=whole_number(request.GET["agent"], name="agent")).first() \
        if request.GET.get("agent", "").isdigit() else project.agents.first()
    initial = {"agent": agent, "system_prompt": agent.system_prompt if agent else "", "include_base": True,
               "prompt_agent": agent}
    if request.GET.get("checkpoint", "").isdigit():
        initial["checkpoints"] = [whole_number(request.GET["checkpoint"], name="checkpoint")]
    form = TryForm(request.POST or None, project=project, initial=initial)
    if request.method == "POST":
        access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)

    def save(data):
        session = try_services.try_create(
            user=request.user, project=project, agent=data["agent"], checkpoint_ids=[c.pk for c in data["checkpoints"]],
            include_base=data["include_base"], system_prompt=data["system_prompt"], message=data["message"],
            context=data["context"], scenario=data["scenario"])
        return redirect("try-session", session_id=session.pk)

    loaded = form["prompt_agent"].value() if form.is_bound else agent and agent.pk
    return handle_form(request, form, save, "webapp/try.html", {
        "project": project, "recent": project.try_sessions.select_related("created_by")[:10],
        "prompt_agent": project.agents.filter(pk=loaded).first() if str(loaded or "").isdigit() else None,
        "servers": project.servers.all(), **_roles(request, project)})


def _session_context(request: HttpRequest, session: TrySession, **forms) -> dict:
    return try_session_context(user=request.user, session=session, **forms)


def try_session_context(*, user, session: TrySession, **forms) -> dict:
    """What the session view is rendered from: by this page, and by its live socket (webapp/live/try_channel.py),
    so what the page shows live is what a reload shows."""
    project = session.project
    return {"session": session, "project": project, "view": try_session_view(session=session),
            "judge_form": forms.get("judge_form") or TryJudgeForm(project=project, initial={
                "rubric_version": session.rubric_version_id, "judge_config": session.judge_config_id}),
            "save_form": forms.get("save_form") or TrySaveForm(project=project), **_user_roles(user, project)}


@login_required
@require_safe
def try_session(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.in_project_get(user=request.user, model=TrySession, pk=session_id)
    template = "webapp/partials/try_session.html" if getattr(request, "htmx", False) else "webapp/try_session.html"
    return render(request, template, _session_context(request, session))


@login_required
@require_POST
def try_judge(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.in_project_get(user=request.user, model=TrySession, pk=session_id, role=Role.REVIEWER)
    form = TryJudgeForm(request.POST, project=session.project)
    if form.is_valid():
        try:
            try_services.try_judge_request(user=request.user, session=session, **form.cleaned_data)
            return redirect("try-session", session_id=session.pk)
        except ValidationError as err:
            apply_service_errors(form, err)
    return render(request, "webapp/try_session.html", _session_context(request, session, judge_form=form), status=400)


@login_required
@require_POST
def try_save(request: HttpRequest, session_id: int) -> HttpResponse:
    session = access.in_project_get(user=request.user, model=TrySession, pk=session_id, role=Role.EDITOR)
    form = TrySaveForm(request.POST, project=session.project)
    if form.is_valid():
        try:
            scenario = try_services.try_save_scenario(user=request.user, session=session, **form.cleaned_data)
            messages.success(request, f"saved as scenario {scenario.external_id} of {scenario.scenario_set.name}")
            return redirect("try-session", session_id=session.pk)
        except ValidationError as err:
            apply_service_errors(form, err)
    return render(request, "webapp/try_session.html", _session_context(request, session, save_form=form), status=400)


@login_required
@require_POST
def try_end(request: HttpRequest, session_id: int) -> HttpResponse:
    """Ends a session still answering: what a person does when the Try it caps are reached."""
    session = access.in_project_get(user=request.user, model=TrySession, pk=session_id, role=Role.EDITOR)
    if try_services.try_end(user=request.user, session=session):
        messages.success(request, f"session #{session.pk} ended")
    return redirect("try-page", project_id=session.project_id)


@login_required
@require_POST
def try_server_stop(request: HttpRequest, project_id: int) -> HttpResponse:
    """Stops one of the project's inference servers, `server` in the form (it starts again when something asks
    for it)."""
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    raw = request.POST.get("server", "")
    server = project.servers.filter(pk=whole_number(raw, name="server")).first() if raw.isdigit() else None
    if server is None:
        messages.error(request, "choose one of this project's inference servers to stop")
    else:
        serving_services.project_server_stop(server=server, reason=f"stopped by {request.user.get_username()}")
        messages.success(request, f"the server for {server.base_model} is stopping")
    return redirect("try-page", project_id=project.pk)
