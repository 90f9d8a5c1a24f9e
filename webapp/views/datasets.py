"""Dataset pages: create one, its versions with a preview of each (conversations rendered as trajectories are,
tool calls as blocks, every text escaped), a JSONL upload that makes a new version, and the export."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_safe

from webapp.dataset_forms import DatasetForm, DatasetUploadForm
from webapp.forms import apply_service_errors
from webapp.input_rules import whole_number
from webapp.models import Role
from webapp.models.datasets import Dataset, DatasetVersion
from webapp.selectors import access
from webapp.selectors import datasets as dataset_selectors
from webapp.services import datasets as dataset_services
from webapp.views.common import handle_form

ROWS_PER_PAGE = 20


@login_required
def dataset_create(request: HttpRequest, project_id: int) -> HttpResponse:
    project = access.project_get(user=request.user, project_id=project_id, role=Role.EDITOR)
    form = DatasetForm(request.POST or None)

    def save(data):
        dataset = dataset_services.dataset_create(user=request.user, project=project, **data)
        return redirect("dataset-detail", dataset_id=dataset.id)

    return handle_form(request, form, save, "webapp/form_page.html", {"project": project, "title": "New dataset"})


def _int(value: str | None, default: int | None, name: str) -> int | None:
    return whole_number(value, name=name) if value and value.isdigit() else default


@login_required
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    dataset = access.in_project_get(user=request.user, model=Dataset, pk=dataset_id)
    role = access.project_role(user=request.user, project=dataset.project)
    upload_form, status = DatasetUploadForm(project=dataset.project), 200
    if request.method == "POST":
        access.in_project_get(user=request.user, model=Dataset, pk=dataset_id, role=Role.EDITOR)
        upload_form = DatasetUploadForm(request.POST, request.FILES, project=dataset.project)
        if upload_form.is_valid():
            upload = upload_form.cleaned_data["file"]
            try:
                version = dataset_services.dataset_upload(
                    user=request.user, dataset=dataset, file_name=upload.name, mode=upload_form.cleaned_data["mode"],
                    data=upload.read(settings.STUDIO_MAX_UPLOAD_BYTES + 1), model=upload_form.cleaned_data["model"])
                messages.success(request, f"version {version.number}: {version.note}")
                return redirect("dataset-detail", dataset_id=dataset.id)
            except ValidationError as err:
                apply_service_errors(upload_form, err)
                status = getattr(err, "status", 400)  # a project limit: 413 (bytes) or 409 (counts)
        status = status if status != 200 else 400
    version = dataset_selectors.dataset_version_for(dataset=dataset,
                                                    number=_int(request.GET.get("version"), None, "version"))
    if version is None and request.GET.get("version"):
        raise Http404("no such version")
    page = max(1, _int(request.GET.get("page"), 1, "page") or 1)
    rows = dataset_selectors.dataset_version_rows(version=version, offset=(page - 1) * ROWS_PER_PAGE,
                                                  limit=ROWS_PER_PAGE) if version else []
    return render(request, "webapp/dataset_detail.html", {
        "project": dataset.project, "dataset": dataset, "can_edit": role == Role.EDITOR,
        "versions": dataset_selectors.dataset_versions(dataset=dataset), "version": version, "rows": rows,
        "page": page, "first_index": (page - 1) * ROWS_PER_PAGE, "last_index": (page - 1) * ROWS_PER_PAGE + len(rows),
        "more": bool(version) and version.row_count > page * ROWS_PER_PAGE,
        "upload_form": upload_form, "distillations": dataset.distillations.order_by("-id")[:10],
    }, status=status)


@login_required
@require_safe
def dataset_export(request: HttpRequest, version_id: int) -> StreamingHttpResponse:
    version = access.in_project_get(user=request.user, model=DatasetVersion, pk=version_id, path="dataset__project")
    response = StreamingHttpResponse(dataset_selectors.dataset_version_jsonl(version=version),
                                     content_type="application/jsonl; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=True, filename=f"{version.dataset.name}-v{version.number}.jsonl")
    return response
