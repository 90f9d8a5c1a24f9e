"""Exports of a checkpoint (issue 37; docs/use.md): the adapter as it is (the zip the run page offers), or merged
into the base model by a worker (webapp/execution/exports.py) with a model card. The checkpoint comes from the
project's rows; where the export is written is derived from the run's output directory, never typed."""
from __future__ import annotations

from pathlib import Path

from django.db import transaction

from webapp.execution.dispatch import CHECKPOINT_EXPORT, work_enqueue
from webapp.limits import limit_check
from webapp.models import Checkpoint, ModelExport, Role
from webapp.selectors.evaluation import run_evaluation_data
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
    """README.md of a merged export: what it was trained from and how it did on held-out scenarios."""
    run = checkpoint.run
    config = run.config or {}
    held_out = len((config.get("evaluation") or {}).get("held_out_ids") or [])
    trained_on = len(config.get("scenarios") or []) - held_out
    row = next((r for r in run_evaluation_data(run=run)["checkpoints"] if r["checkpoint"].pk == checkpoint.pk), {})
    win = row.get("win_rate")
    if win is None:
        win_text = "not evaluated (run “evaluate now” on the run page)"
    else:
        win_text = f"{win:.1%} against the base model"
        if row.get("ci_low") is not None:
            win_text += f" (95 % interval {row['ci_low']:.1%}–{row['ci_high']:.1%}, {row.get('scenarios')} scenarios)"
    rubric = run.rubric_version
    judge = (config.get("judge") or {}).get("model") or "none (the environment's own reward)"
    lora = config.get("lora") or {}
    lines = [
        f"# {run.name} @ step {checkpoint.step_index}", "",
        f"A LoRA adapter trained with GRPO by Rubric Studio (run {run.pk}, project “{run.project.name}”), merged into "
        "its base model: load it with `transformers` alone.", "",
        "| | |", "|---|---|",
        f"| base model | `{config.get('base_model', '')}` |",
        f"| checkpoint | `{checkpoint.adapter_name}` (step {checkpoint.step_index} of {run.total_steps}) |",
        f"| training data | scenario set “{run.scenario_set.name}”: {trained_on} training scenarios, "
        f"{held_out} held out |",
        f"| rubric | {f'{rubric} ' if rubric else 'none'}|",
        f"| judge | `{judge}` |",
        f"| environment | `{(config.get('environment') or {}).get('kind', '')}` |",
        f"| LoRA | r {lora.get('r', '')}, alpha {lora.get('alpha', '')} |",
        f"| held-out win rate | {win_text} |", "",
    ]
    if rubric is not None:
        lines += ["## Rubric", "", *[f"> {line}" for line in rubric.text.splitlines()], ""]
    if config.get("system_prompt"):
        lines += ["## System prompt it was trained with", "", "```", config["system_prompt"], "```", ""]
    return "\n".join(lines)
