"""Dataset rows shared between versions (issue 43): an appended version stops storing copies of its base's rows,
and every row records its size in bytes (counted against the project's limits).

The conversion keeps every version's rows: an appended version's copy of its base's rows is deleted only where it
equals the base's rows exactly (the base still stores them, and the version reads them through `base`). Where it
does not (an old copy that diverged), the version keeps its own full copy and stops naming the base, so its rows
never change either way."""
from __future__ import annotations

import json

import django.db.models.deletion
from django.db import migrations, models


def _size(messages, tools, metadata) -> int:
    return len(json.dumps([messages, tools, metadata], ensure_ascii=False, separators=(",", ":")).encode())


def share_rows(apps, schema_editor) -> None:
    DatasetVersion = apps.get_model("webapp", "DatasetVersion")
    DatasetRow = apps.get_model("webapp", "DatasetRow")
    for row in DatasetRow.objects.filter(size=0).iterator(chunk_size=500):
        DatasetRow.objects.filter(pk=row.pk).update(size=_size(row.messages, row.tools, row.metadata))
    # Newest first: each appended version is compared with its base's full copy, which is only shortened after.
    for version in DatasetVersion.objects.exclude(base=None).order_by("dataset_id", "-number").iterator():
        base = DatasetVersion.objects.get(pk=version.base_id)
        fields = ("index", "messages", "tools", "metadata")
        mine = list(DatasetRow.objects.filter(version=version, index__lt=base.row_count)
                    .order_by("index").values_list(*fields))
        theirs = list(DatasetRow.objects.filter(version=base).order_by("index").values_list(*fields))
        if len(theirs) == base.row_count and mine == theirs:
            DatasetRow.objects.filter(version=version, index__lt=base.row_count).delete()
        else:
            DatasetVersion.objects.filter(pk=version.pk).update(base=None)


def copy_rows(apps, schema_editor) -> None:
    """Back to copies: oldest first, each appended version gets its (by then whole) base's rows again."""
    DatasetVersion = apps.get_model("webapp", "DatasetVersion")
    DatasetRow = apps.get_model("webapp", "DatasetRow")
    for version in DatasetVersion.objects.exclude(base=None).order_by("dataset_id", "number").iterator():
        DatasetRow.objects.bulk_create(
            DatasetRow(version_id=version.pk, index=r.index, messages=r.messages, tools=r.tools, metadata=r.metadata)
            for r in DatasetRow.objects.filter(version_id=version.base_id).order_by("index"))
    _checked_now(schema_editor)


def _checked_now(schema_editor) -> None:
    """PostgreSQL checks the new rows' foreign keys at commit; the operations after this one alter the table, which
    it refuses while those checks are pending, so they run now."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ("webapp", "0017_agent_model_catalogue"),
    ]

    operations = [
        migrations.AddField(
            model_name="datasetrow",
            name="size",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name="datasetrow",
            name="version",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="own_rows",
                                    to="webapp.datasetversion"),
        ),
        migrations.AlterField(
            model_name="datasetrow",
            name="index",
            field=models.PositiveIntegerField(help_text="0-based position in the versions that hold it (its JSONL "
                                                        "line order)."),
        ),
        migrations.AlterField(
            model_name="datasetversion",
            name="base",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.RESTRICT,
                                    related_name="+", to="webapp.datasetversion"),
        ),
        migrations.RunPython(share_rows, copy_rows),
    ]
