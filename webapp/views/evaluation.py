"""On-demand held-out evaluation of a checkpoint, from the run page's checkpoint table."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.selectors import access
from webapp.models import Checkpoint, Role
from webapp.services.monitoring import run_evaluate


@login_required
@require_POST
def checkpoint_evaluate(request: HttpRequest, checkpoint_id: int) -> HttpResponse:
    checkpoint = access.in_project_get(user=request.user, model=Checkpoint, pk=checkpoint_id, role=Role.EDITOR,
                                          path="run__project")
    error = ""
    try:
        run_evaluate(user=request.user, run=checkpoint.run, checkpoint=checkpoint)
    except ValidationError as err:
        error = " ".join(err.messages)
    if getattr(request, "htmx", False):  # the button's place says at once what happens; evaluation.js ends it
        return render(request, "webapp/partials/evaluation_started.html", {"checkpoint": checkpoint, "error": error})
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"evaluating step {checkpoint.step_index} against the base model; the curve and "
                                  "the checkpoint table gain the result when it is done")
    return redirect("run-detail", run_id=checkpoint.run_id)
