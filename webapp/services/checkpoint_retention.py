"""Checkpoints kept by a policy (issue 47): every step's adapter is written while a run trains (a resume needs the
newest; a 7B model's LoRA at rank 16 is about 160 MB a step), and once the run has ended the ones its policy does
not keep (selectors/retention.py says which and why) are deleted, rows and directories.

Called by the worker as a run's engine exits (execution/runner.py) and on a schedule for every ended run
(`python manage.py prune_checkpoints`, and Celery beat's checkpoints_prune_task), which also catches runs that
ended without an engine (cancelled while queued or parked). Only directories inside the run's own output
directory under STUDIO_RUNS_DIR are removed: a stored path is never trusted beyond that.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.models import Checkpoint, Run
from webapp.models.runs import FINAL_STATUSES
from webapp.selectors.retention import checkpoints_retained

log = logging.getLogger(__name__)


def checkpoints_mark_served(*, checkpoint_ids: list[int]) -> None:
    """Marks checkpoints served now (Try it, a checkpoint's endpoint, a distillation's teacher): kept from then on."""
    if checkpoint_ids:
        Checkpoint.objects.filter(pk__in=checkpoint_ids).update(served_at=timezone.now())


def _removable(path: str, run: Run) -> Path | None:
    """The checkpoint's directory when it lies inside the run's own output directory under STUDIO_RUNS_DIR (a
    fork's rows never reach its parent's files), else None."""
    if not path or not run.output_dir:
        return None
    runs_dir = Path(settings.STUDIO_RUNS_DIR).resolve()
    root = Path(run.output_dir).resolve()
    target = Path(path).resolve()
    if runs_dir not in root.parents or root not in target.parents:
        return None
    return target


def _bytes(path: Path) -> int:
    try:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    except OSError:
        return 0


def run_checkpoints_prune(*, run_id: int) -> list[int]:
    """Deletes the checkpoints of an ended run that its policy does not keep; returns their steps ([] for a run
    still going, which may need any of them to resume or to serve its own endpoint)."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or run.status not in FINAL_STATUSES:
        return []
    dropped = checkpoints_retained(run=run).dropped
    if not dropped:
        return []
    candidates = list(run.checkpoints.filter(step_index__in=dropped))
    gone: list[tuple[int, Path | None]] = []
    with transaction.atomic():
        # Re-checked in the delete itself: a fork, an export or a serve that began since the reading keeps it.
        for c in candidates:
            if Checkpoint.objects.filter(pk=c.pk, served_at=None, forks=None, exports=None,
                                         run__status__in=FINAL_STATUSES).exclude(
                    pk__in=_teacher_ids()).delete()[0]:
                gone.append((c.step_index, _removable(c.path, run)))
    freed = 0
    for step, directory in gone:
        if directory is None:
            log.warning("run %s: checkpoint of step %s lies outside the run's directory; its files are left", run_id,
                        step)
            continue
        freed += _bytes(directory)
        shutil.rmtree(directory, ignore_errors=True)
    if gone:
        before = run.checkpoints_pruned or {}
        steps = sorted(set(before.get("steps") or []) | {s for s, _ in gone})
        Run.objects.filter(pk=run_id).update(checkpoints_pruned={
            "steps": steps, "freed_bytes": int(before.get("freed_bytes") or 0) + freed,
            "at": timezone.now().isoformat()})
        log.info("run %s: deleted the checkpoints of steps %s (%s bytes)", run_id, [s for s, _ in gone], freed)
    return [s for s, _ in gone]


def _teacher_ids():
    from webapp.models import Distillation

    return Distillation.objects.exclude(teacher_checkpoint=None).values("teacher_checkpoint")


def runs_checkpoints_prune() -> dict[int, list[int]]:
    """The schedule: every ended run with a checkpoint its policy does not keep; {run id: deleted steps}."""
    done: dict[int, list[int]] = {}
    ended = Run.objects.filter(status__in=FINAL_STATUSES, config__retention__keep_last__gt=0).order_by("id")
    for run_id in ended.values_list("id", flat=True):
        if steps := run_checkpoints_prune(run_id=run_id):
            done[run_id] = steps
    return done
