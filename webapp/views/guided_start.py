"""The guided start (issue 48): on the home page and in an empty project, an example and a model chosen by clicks,
then Launch and the run page (services/guided_start.py)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from webapp.guided_start_forms import BLANK, GuidedStartForm
from webapp.models import Role
from webapp.selectors import access
from webapp.services.guided_start import HELD_OUT, SCENARIOS, guided_start_blank, guided_start_launch
from webapp.views.common import handle_form


@login_required
def guided_start(request: HttpRequest, project_id: int | None = None) -> HttpResponse:
    """`project_id` None: the home page's start, which makes the project too."""
    project = None if project_id is None else access.project_get(user=request.user, project_id=project_id,
                                                                  role=Role.EDITOR)
    form = GuidedStartForm(request.POST or None)

    def save(data):
        if data["example"] == BLANK:
            agent_project = guided_start_blank(user=request.user, project=project)
            messages.info(request, "write what your agent does; then give it questions and a rubric to be scored by")
            return redirect("agent-create", project_id=agent_project.id)
        run = guided_start_launch(user=request.user, project=project, example=data["example"],
                                  base_model=data["base_model"], launch_token=data["launch_token"])
        messages.success(request, "your first run is launched: this page shows it learning as it goes")
        return redirect("run-detail", run_id=run.id)

    return handle_form(request, form, save, "webapp/guided_start.html", {"project": project, **guided_context(form)})


def guided_context(form: GuidedStartForm | None = None) -> dict:
    """What the guided start's form needs where another page shows it (the home page, an empty project)."""
    return {"guided_form": form or GuidedStartForm(), "guided_scenarios": SCENARIOS, "guided_held_out": HELD_OUT}
