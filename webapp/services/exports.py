"""Exports of a checkpoint (issue 37; docs/use.md): the adapter as it is (the zip the run page offers), or merged
into the base model by a worker (webapp/execution/exports.py) with a model card. The checkpoint comes from the
project's rows; where the export is written is derived from the run's output directory, never typed."""
from __future__ import annotations

from pathlib import Path

from django.db import transaction

from webapp.execution.dispatch import CHECKPOINT_EXPORT, work_enqueue
from webapp.limits import limit_check
from webapp.models import Checkpoint, ModelExport, Role
from webapp.selectors.model_card import model_card
from webapp.selectors.usage import exports_usage
from webapp.services.access import require_role


def export_dir(checkpoint: Checkpoint) -> Path:
    return Path(checkpoint.run.output_dir) / "exports" / f"step_{checkpoint.step_index:04d}-merged"


def checkpoint_export_request(*, user, checkpoint: Checkpoint) -> ModelExport:
    """A merged export of the checkpoint, queued (or the one queued or running already). Editors: it loads the
    base model on a worker."""
    require_role(user=user, project=checkpoint.run.project, role=Role.EDITOR)
    with transaction.atomic():
        running = checkpoint.exports.filter(status__in=(ModelExport.Status.QUEUED, ModelExport.Status.RUNNING)).first()
        if running is not None:
            return running
        limit_check(limit_name="exports", usage=exports_usage(project=checkpoint.run.project), adding=1)
        export = ModelExport.objects.create(checkpoint=checkpoint, created_by=user, phase="waiting for a worker")
        transaction.on_commit(lambda: work_enqueue(name=CHECKPOINT_EXPORT, object_id=export.pk))
    return export


def export_model_card(*, checkpoint: Checkpoint) -> str:
    """README.md of a merged export (webapp/selectors/model_card.py: read from what the run did)."""
    return model_card(checkpoint=checkpoint)
