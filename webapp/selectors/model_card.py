"""What a checkpoint's model card says (the README.md of a merged export), read from what its run did: the run's
stored config (its kind, data, judge, starting adapter), the dataset version it trained on and the run's events
(held-out win rate, held-out loss). Nothing is taken from today's catalogue objects, which may have changed
since the launch (DESIGN §8, invariant 1)."""
from __future__ import annotations

from typing import Any

from webapp.models import Checkpoint, Run
from webapp.models.datasets import DatasetVersion, Distillation
from webapp.selectors.evaluation import run_evaluation_data


def run_kind(run: Run) -> str:
    """"SFT", "distillation", "GRPO" or "SFT → GRPO" (a GRPO run whose adapter started from an SFT one)."""
    config = run.config or {}
    if config.get("kind") == "sft":
        version = run.dataset_version
        return "distillation" if version is not None and version.source == DatasetVersion.Source.DISTILLATION \
            else "SFT"
    parent = run.parent_checkpoint
    if parent is not None and (parent.run.config or {}).get("kind") == "sft":
        return "SFT → GRPO"
    return "GRPO"


def _kind_words(kind: str) -> str:
    return {"SFT": "supervised fine-tuning (SFT) on a dataset's conversations",
            "distillation": "distillation: supervised fine-tuning (SFT) on a teacher model's answers",
            "SFT → GRPO": "GRPO, starting from an SFT checkpoint (SFT → GRPO)"}.get(kind, "GRPO")


def scenario_split(config: dict[str, Any]) -> tuple[int, int]:
    """(training scenarios, held-out scenarios) as the engine splits the stored config's scenarios: the held-out
    ids and fraction of its `evaluation`, seeded as the run was. An SFT run trains on none of them."""
    from training.config import parse_run_config
    from training.monitoring.evaluation import split_scenarios
    from training.environments.scenarios import load_scenarios

    parsed = parse_run_config(config)
    scenarios = load_scenarios(parsed) if parsed.scenarios else []
    if not scenarios or not parsed.evaluation.enabled:
        return (0 if config.get("kind") == "sft" else len(scenarios)), 0
    train, held = split_scenarios(scenarios, parsed.evaluation, parsed.seed, require_train=False)
    return (0 if config.get("kind") == "sft" else len(train)), len(held)


def conversation_split(run: Run) -> tuple[int, int]:
    """(conversations trained on, held out) of an SFT run's dataset version, split as its engine splits them
    (the same parser and seeded split, over the same JSONL the worker writes)."""
    from training.sft.data import parse_jsonl, split_held_out
    from webapp.selectors.datasets import dataset_version_jsonl

    conversations, _ = parse_jsonl("".join(dataset_version_jsonl(version=run.dataset_version)).encode())
    fraction = float(((run.config or {}).get("sft") or {}).get("held_out_fraction", 0.1))
    train, held = split_held_out(conversations, fraction, int((run.config or {}).get("seed", 0)))
    return len(train), len(held)


def _teacher(version: DatasetVersion) -> str:
    job = Distillation.objects.filter(accepted_version=version).select_related("teacher", "teacher_checkpoint").first()
    if job is None:
        return "a teacher model"
    if job.teacher is not None:
        return f"teacher `{job.teacher.model}`"
    return f"teacher checkpoint `{job.teacher_checkpoint.adapter_name}`" if job.teacher_checkpoint else "a teacher"


def _training_data(run: Run, kind: str) -> list[str]:
    config = run.config or {}
    trained, held = scenario_split(config)
    if kind in ("SFT", "distillation"):
        version = run.dataset_version
        if version is None:
            rows = ["| training data | conversations given in the run's config |"]
        else:
            train_n, held_n = conversation_split(run)
            origin = f", distilled by {_teacher(version)}" if kind == "distillation" else ""
            rows = [f"| training data | dataset “{version.dataset.name}” v{version.number}{origin}: "
                    f"{train_n} conversations trained on, {held_n} held out for the held-out loss |"]
        if held:
            rows.append(f"| held-out scenarios | {held} of scenario set “{run.scenario_set.name}” "
                        "(the held-out win rate; none trained on) |")
        return rows
    return [f"| training data | scenario set “{run.scenario_set.name}”: {trained} training scenarios, "
            f"{held} held out |"]


def judge_model(config: dict[str, Any]) -> str | None:
    """The judge's model as the run froze it: the `judge` section holds the scorer's options (judge_model)."""
    judge = config.get("judge") or {}
    return judge.get("judge_model") or judge.get("model")


def _reward(run: Run, kind: str) -> list[str]:
    config = run.config or {}
    judge = judge_model(config)
    rubric = run.rubric_version
    if kind in ("SFT", "distillation"):
        rows = ["| objective | cross-entropy on the assistant turns of the conversations (no reward) |"]
        if judge:
            rows.append(f"| judge | `{judge}`, for the held-out win rate only |")
        return rows
    if judge:
        return [f"| reward | judge `{judge}` ranking each group against the rubric |",
                f"| rubric | {rubric if rubric else 'the judge’s default'} |"]
    environment = (config.get("environment") or {}).get("kind", "")
    return [f"| reward | the environment's own reward (`{environment}`); no judge |"]


def _started_from(run: Run) -> str:
    parent = run.parent_checkpoint
    if parent is not None:
        return (f"`{parent.adapter_name}`: step {parent.step_index} of run “{parent.run.name}” "
                f"({run_kind(parent.run)})")
    if (run.config or {}).get("init_checkpoint"):
        return "an adapter given at launch"
    return "the base model (a new adapter)"


def _held_out(run: Run, checkpoint: Checkpoint, kind: str) -> list[str]:
    rows = []
    if kind in ("SFT", "distillation"):
        losses = {e["step"]: e for e in run.events.filter(kind="held_out_loss").order_by("seq")
                  .values_list("payload", flat=True)}
        at = max((s for s in losses if s <= checkpoint.step_index and losses[s].get("loss") is not None),
                 default=None)
        if at is None:
            rows.append("| held-out loss | not measured (no conversation held out, or not reached yet) |")
        else:
            before = losses.get(0, {}).get("loss")
            rows.append(f"| held-out loss | {losses[at]['loss']:.4f} at step {at} on {losses[at]['conversations']} "
                        f"conversations" + (f" ({before:.4f} before training)" if before is not None else "") + " |")
    row = next((r for r in run_evaluation_data(run=run)["checkpoints"] if r["checkpoint"].pk == checkpoint.pk), {})
    win = row.get("win_rate")
    if win is None:
        if kind not in ("SFT", "distillation") or scenario_split(run.config or {})[1]:
            rows.append("| held-out win rate | not evaluated (run “evaluate now” on the run page) |")
        return rows
    text = f"{win:.1%} against the base model"
    if row.get("ci_low") is not None:
        text += f" (95 % interval {row['ci_low']:.1%}–{row['ci_high']:.1%}, {row.get('scenarios')} scenarios)"
    return rows + [f"| held-out win rate | {text} |"]


def model_card(*, checkpoint: Checkpoint) -> str:
    """README.md of a merged export: how it was trained, on what, scored how, from where, and how it did."""
    run = checkpoint.run
    config = run.config or {}
    kind = run_kind(run)
    lora = config.get("lora") or {}
    lines = [
        f"# {run.name} @ step {checkpoint.step_index}", "",
        f"A LoRA adapter trained with {_kind_words(kind)} by Rubric Studio (run {run.pk}, project "
        f"“{run.project.name}”), merged into its base model: load it with `transformers` alone.", "",
        "| | |", "|---|---|",
        f"| kind | {kind} |",
        f"| base model | `{config.get('base_model', '')}` |",
        f"| started from | {_started_from(run)} |",
        f"| checkpoint | `{checkpoint.adapter_name}` (step {checkpoint.step_index} of {run.total_steps}) |",
        *_training_data(run, kind),
        *_reward(run, kind),
        f"| environment | `{(config.get('environment') or {}).get('kind', '')}` |",
        f"| LoRA | r {lora.get('r', '')}, alpha {lora.get('alpha', '')} |",
        *_held_out(run, checkpoint, kind), "",
    ]
    rubric = run.rubric_version
    if rubric is not None and kind not in ("SFT", "distillation"):
        lines += ["## Rubric", "", *[f"> {line}" for line in rubric.text.splitlines()], ""]
    if config.get("system_prompt"):
        lines += ["## System prompt it was trained with", "", "```", config["system_prompt"], "```", ""]
    return "\n".join(lines)
