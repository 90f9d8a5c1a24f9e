"""A checkpoint's merged export (issue 37): ask for it, watch its progress (the page polls the same template
while it is live), download it as a zip."""
from __future__ import annotations

from pathlib import Path

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_POST, require_safe

from webapp.limits import LimitExceeded
from webapp.models import Checkpoint, ModelExport, Role
from webapp.selectors import access
from webapp.services.checkpoints import checkpoint_zip_chunks
from webapp.services.exports import checkpoint_export_request


@login_required
@require_POST
def checkpoint_export(request: HttpRequest, checkpoint_id: int) -> HttpResponse:
    checkpoint = access.in_project_get(user=request.user, model=Checkpoint, pk=checkpoint_id, path="run__project",
                                       role=Role.EDITOR)
    try:
        export = checkpoint_export_request(user=request.user, checkpoint=checkpoint)
    except LimitExceeded as err:  # the project's exports limit: said on the run page, where the button is
        messages.error(request, " ".join(err.messages))
        return redirect("run-detail", run_id=checkpoint.run_id)
    return redirect("export-detail", export_id=export.pk)


@login_required
@require_safe
def export_detail(request: HttpRequest, export_id: int) -> HttpResponse:
    export = access.in_project_get(user=request.user, model=ModelExport, pk=export_id, path="checkpoint__run__project")
    template = "webapp/partials/export_status.html" if getattr(request, "htmx", False) else "webapp/export.html"
    return render(request, template, {"export": export, "checkpoint": export.checkpoint,
                                      "run": export.checkpoint.run, "project": export.checkpoint.run.project})


@login_required
@require_safe
def export_download(request: HttpRequest, export_id: int) -> StreamingHttpResponse:
    export = access.in_project_get(user=request.user, model=ModelExport, pk=export_id, path="checkpoint__run__project")
    root = Path(export.path) if export.status == ModelExport.Status.DONE and export.path else None
    if root is None or not root.is_dir():
        raise Http404("this export is not ready")
    name = f"{export.checkpoint.adapter_name.replace('@', '-step')}-merged.zip"
    response = StreamingHttpResponse(checkpoint_zip_chunks(root=root), content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=name)
    return response
