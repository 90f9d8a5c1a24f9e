"""A project's usage against its limits (webapp/limits.py): what the project page's table shows and what the
checks before a write count."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db.models import Count, Sum

from webapp.limits import BYTE_LIMITS, LABELS, project_limits
from webapp.models import Checkpoint, DatasetRow, DatasetVersion, ExternalCall, ModelExport, Project


def dataset_rows_usage(*, project: Project) -> tuple[int, int]:
    """(rows, bytes) the project's datasets store: a row shared by several versions is stored, and counted, once."""
    stored = DatasetRow.objects.filter(version__dataset__project=project).aggregate(n=Count("id"), size=Sum("size"))
    return int(stored["n"] or 0), int(stored["size"] or 0)


def dataset_versions_usage(*, project: Project) -> int:
    return DatasetVersion.objects.filter(dataset__project=project).count()


def recorded_calls_usage(*, project: Project) -> int:
    return ExternalCall.objects.filter(run__project=project).count()


def exports_usage(*, project: Project) -> int:
    return ModelExport.objects.filter(checkpoint__run__project=project).count()


def checkpoint_bytes_usage(*, project: Project) -> int:
    """Bytes on this machine's disk under the project's checkpoints' directories (measured, not recorded: what a
    worker wrote is what counts; a checkpoint on another machine's disk counts 0 here)."""
    total = 0
    for path in Checkpoint.objects.filter(run__project=project).values_list("path", flat=True):
        total += _disk_bytes(Path(path)) if path else 0
    return total


def _disk_bytes(path: Path) -> int:
    try:
        if path.is_file():
            return path.stat().st_size
        if path.is_dir():
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    except OSError:  # removed while being measured
        return 0
    return 0


def project_usage(*, project: Project) -> list[dict[str, Any]]:
    """Each limit with the project's usage: the project page's table, in the order the docs list them."""
    rows, size = dataset_rows_usage(project=project)
    used = {"dataset_rows": rows, "dataset_bytes": size,
            "dataset_versions": dataset_versions_usage(project=project),
            "recorded_calls": recorded_calls_usage(project=project), "exports": exports_usage(project=project),
            "checkpoint_bytes": checkpoint_bytes_usage(project=project), "webhooks": project.webhooks.count()}
    limits = project_limits()
    return [{"name": name, "label": LABELS[name], "usage": value, "limit": getattr(limits, name),
             "bytes": name in BYTE_LIMITS, "share": value / getattr(limits, name)} for name, value in used.items()]
