"""Reads of datasets: a project's datasets with their latest version, a version's rows, its JSONL export."""
from __future__ import annotations

import json
from typing import Iterator

from django.db.models import Count, Max, QuerySet

from webapp.models import Project
from webapp.models.datasets import Dataset, DatasetRow, DatasetVersion

EXPORT_BATCH = 500


def datasets_for_project(*, project: Project) -> QuerySet[Dataset]:
    return project.datasets.annotate(version_count=Count("versions"), latest_number=Max("versions__number"))


def dataset_versions(*, dataset: Dataset) -> QuerySet[DatasetVersion]:
    return dataset.versions.select_related("created_by").order_by("-number")


def dataset_version_for(*, dataset: Dataset, number: int | None) -> DatasetVersion | None:
    """The version `number` of the dataset (None: its latest); None when there is no such version."""
    versions = dataset.versions.order_by("-number")
    return versions.filter(number=number).first() if number is not None else versions.first()


def dataset_version_rows(*, version: DatasetVersion, offset: int = 0, limit: int = 20) -> list[DatasetRow]:
    """Rows offset..offset+limit of the version, in order. A version's positions are 0..row_count-1 across its
    chain, so a page is a range of positions (an index range scan), not an offset into a sorted whole."""
    return list(version.rows.filter(index__gte=offset, index__lt=offset + limit).order_by("index"))


def dataset_version_jsonl(*, version: DatasetVersion) -> Iterator[str]:
    """The version as JSONL, one conversation a line, in batches (a large version is never loaded whole)."""
    rows = version.rows  # the chain is read once
    for start in range(0, version.row_count, EXPORT_BATCH):
        for row in rows.filter(index__gte=start, index__lt=start + EXPORT_BATCH).order_by("index"):
            yield json.dumps(row.as_json(), ensure_ascii=False) + "\n"
