"""Writes to datasets: create one, add a version from an upload (checked row by row: one bad row and nothing
is stored) or from rows the app produced (accepted distillation drafts). An appended version stores only its
new rows (the earlier ones are shared through its base, webapp/models/datasets.py), and every version is
counted against the project's limits (webapp/limits.py) before anything is stored.
The feature starts here; its parts: services/dataset_fit.py, dataset_forms.py, views/datasets.py,
selectors/datasets.py, models/datasets.py, api/dataset_views.py and dataset_serializers.py (docs/webapp.md).
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from webapp.limits import limit_check
from webapp.models import Project, Role
from webapp.models.datasets import Dataset, DatasetRow, DatasetVersion
from webapp.selectors.usage import dataset_rows_usage, dataset_versions_usage
from webapp.services.access import require_role
from webapp.services.dataset_fit import conversations_over_context
from webapp.storable import holds_nul

UPLOAD_MODES = ("append", "replace")


def dataset_create(*, user, project: Project, name: str, description: str = "") -> Dataset:
    require_role(user=user, project=project, role=Role.EDITOR)
    dataset = Dataset(project=project, name=name.strip(), description=description)
    dataset.full_clean(validate_unique=False)
    try:
        with transaction.atomic():
            dataset.save()
    except IntegrityError:
        raise ValidationError({"name": ["this project already has a dataset with that name"]}) from None
    return dataset


def dataset_upload(*, user, dataset: Dataset, file_name: str, data: bytes, mode: str = "append",
                   model: str = "") -> DatasetVersion:
    """A new version from a JSONL upload: the latest version's rows and the file's (`append`), or the file's
    alone (`replace`). Any bad row refuses the whole file, each problem listed by line and field. `model` (a
    catalogue name): each conversation is counted with its tokenizer and must fit its context."""
    from training.sft.data import parse_jsonl

    require_role(user=user, project=dataset.project, role=Role.EDITOR)
    if mode not in UPLOAD_MODES:
        raise ValidationError({"mode": [f"choose one of: {', '.join(UPLOAD_MODES)}"]})
    if len(data) > settings.STUDIO_MAX_UPLOAD_BYTES:
        raise ValidationError({"file": [f"the file is larger than {settings.STUDIO_MAX_UPLOAD_BYTES:,} bytes; "
                                        "split it into several uploads (append)"]})
    # parse_jsonl refuses a line nested deeper than training.sft.data.MAX_DEPTH, naming it, before decoding it.
    conversations, errors = parse_jsonl(data, max_rows=settings.STUDIO_MAX_UPLOAD_ROWS,
                                        max_line_bytes=settings.STUDIO_MAX_CONVERSATION_BYTES)
    if errors:
        raise ValidationError({"file": [f"{file_name}: {e}" for e in errors]})
    rows = [{**c.to_json(), "metadata": {"file": file_name[:200], "line": None}} for c in conversations]
    _number_lines(rows, data)
    if any(holds_nul(r) for r in rows):  # "\u0000" escapes pass JSON parsing; PostgreSQL's JSON refuses them
        raise ValidationError({"file": [f"{file_name}: a row holds a null character (U+0000); remove it"]})
    fit = ""
    if model:
        too_long, fit = conversations_over_context(model=model, conversations=conversations,
                                                   places=[f"line {r['metadata']['line']}" for r in rows])
        if too_long:
            raise ValidationError({"file": [f"{file_name}: {p}" for p in too_long]})
    verb = "appended" if mode == "append" and dataset.versions.exists() else "uploaded"
    return dataset_version_create(user=user, dataset=dataset, rows=rows, source=DatasetVersion.Source.UPLOAD,
                                  note=f"{verb} {len(rows)} conversation{'s' if len(rows) != 1 else ''} from "
                                       f"{file_name[:200]}" + (f" ({fit})" if fit else ""), append=mode == "append")


def _number_lines(rows: list[dict[str, Any]], data: bytes) -> None:
    """Each row's line in its file (blank lines are skipped by the parser, so they are counted here)."""
    text = data.decode("utf-8-sig", errors="replace")
    lines = [n for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    for row, line in zip(rows, lines):
        row["metadata"]["line"] = line


def dataset_version_create(*, user, dataset: Dataset, rows: Iterable[dict[str, Any]], source: str, note: str,
                           append: bool) -> DatasetVersion:
    """The next version: the latest version's rows then `rows` ({"messages", "tools"?, "metadata"?}) when
    `append`, else `rows` alone. Only `rows` are stored: an appended version shares its base's. Rows must already
    be valid conversations (callers check them). Over a project limit: LimitExceeded, nothing stored."""
    require_role(user=user, project=dataset.project, role=Role.EDITOR)
    new_rows = [DatasetRow(messages=r["messages"], tools=r.get("tools") or None, metadata=r.get("metadata") or {})
                for r in rows]
    for row in new_rows:
        row.size = row_size(row)
    with transaction.atomic():
        # The project row lock serialises writes to one project's datasets: two uploads at once can neither make
        # the same version number nor both fit under a limit that only one of them fits under.
        Project.objects.select_for_update().filter(pk=dataset.project_id).first()
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        latest = locked.versions.order_by("-number").first()
        base = latest if append and latest else None
        kept = base.row_count if base else 0
        total = kept + len(new_rows)
        if total > settings.STUDIO_MAX_UPLOAD_ROWS * 10:
            raise ValidationError({"file": [f"the dataset would hold {total:,} conversations; the most a version "
                                            f"holds is {settings.STUDIO_MAX_UPLOAD_ROWS * 10:,}"]})
        if not total:
            raise ValidationError({"file": ["a version needs at least one conversation"]})
        stored_rows, stored_bytes = dataset_rows_usage(project=locked.project)
        limit_check(limit_name="dataset_versions", usage=dataset_versions_usage(project=locked.project), adding=1)
        limit_check(limit_name="dataset_rows", usage=stored_rows, adding=len(new_rows))
        limit_check(limit_name="dataset_bytes", usage=stored_bytes, adding=sum(r.size for r in new_rows))
        version = DatasetVersion.objects.create(
            dataset=locked, number=(latest.number + 1) if latest else 1, source=source, note=note[:500],
            base=base, row_count=total, created_by=user if getattr(user, "is_authenticated", False) else None)
        for i, row in enumerate(new_rows, start=kept):
            row.version, row.index = version, i
        DatasetRow.objects.bulk_create(new_rows, batch_size=1000)
    return version


def row_size(row: DatasetRow) -> int:
    """The bytes a row is counted as: its messages, tools and metadata as compact JSON."""
    return len(json.dumps([row.messages, row.tools, row.metadata], ensure_ascii=False,
                          separators=(",", ":")).encode())
