"""SFT runs in the web app: the engine config of a "Teach (SFT)" launch, and the data file its worker writes.

`run_launch` builds every run's config the one way (run_config_build: agent, scenarios, judge, overrides) and,
for `kind="sft"`, hands it here: the run then trains on a dataset version's conversations, and keeps only the
scenario set's validation scenarios, for the held-out win rate against the base model (an SFT run never trains
on scenarios or their reference answers). The SFT options are the launch form's explicit fields, checked by the
engine's own model; nobody names a file: the worker writes the version's rows into the run's own output
directory when it starts the engine (`sft_engine_config`), and the config never carries a path a person gave.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from webapp.models import Project, Run
from webapp.models.datasets import DatasetVersion

# The launch's SFT choices (training/config/sft.py documents each); anything else is refused by name.
SFT_FIELDS = ("epochs", "max_steps", "batch_tokens", "micro_batch_tokens", "learning_rate", "warmup_ratio",
              "schedule", "min_lr_ratio", "weight_decay", "max_grad_norm", "held_out_fraction", "eval_every",
              "save_every")
DATA_FILE = "dataset.jsonl"


def sft_options_check(*, sft: dict[str, Any]) -> dict[str, Any]:
    """The SFT choices as the engine reads them (its defaults filled in); a ValidationError names a bad one."""
    from pydantic import ValidationError as OptionsError

    from training.config import describe_validation_error
    from training.config.sft import SFTOptions

    unknown = sorted(set(sft) - set(SFT_FIELDS))
    if unknown:
        raise ValidationError({"sft": [f"not an SFT option here: {', '.join(unknown)} (the options are "
                                       f"{', '.join(SFT_FIELDS)})"]})
    try:
        return SFTOptions.model_validate(sft).model_dump(mode="json")
    except OptionsError as err:
        raise ValidationError({"sft": [describe_validation_error(err)]}) from None


def sft_run_config(*, config: dict[str, Any], project: Project, dataset_version: DatasetVersion | None,
                   sft: dict[str, Any] | None) -> dict[str, Any]:
    """A GRPO config built by run_config_build, turned into the SFT run's: kind sft, the checked SFT options,
    the held-out scenarios only. Raises ValidationError beside the field to change."""
    from training import TrainingError
    from training.config import parse_run_config
    from training.environments import needs_judge

    if dataset_version is None:
        raise ValidationError({"dataset": ["choose the dataset this run teaches from"]})
    if dataset_version.dataset.project_id != project.id:
        raise ValidationError({"dataset": ["choose a dataset of this project"]})
    if not dataset_version.row_count:
        raise ValidationError({"dataset": [f"{dataset_version} holds no conversation"]})
    options = sft_options_check(sft=sft or {})
    options["dataset"] = str(dataset_version)
    if settings.STUDIO_MODEL_CHECK == "launch" and config.get("base_model_name"):
        _conversations_fit(dataset_version=dataset_version, model=config["base_model_name"])
    held = set((config.get("evaluation") or {}).get("held_out_ids") or [])
    environment = config.get("environment") or {}
    if not config.get("judge") and needs_judge(environment.get("kind", ""), environment.get("options") or {}):
        # Nothing would score the held-out answers: no win rate (not a demand for a judge); the held-out loss
        # on the dataset's own split still measures the run.
        held = set()
    data = {key: value for key, value in config.items() if key != "grpo"}
    data.update(kind="sft", sft=options, steps=1,  # steps follow from the data; the engine reports them
                scenarios=[s for s in config.get("scenarios") or [] if s.get("id") in held])
    if not held:
        data.pop("evaluation", None)
    try:
        return parse_run_config(data).model_dump(mode="json", exclude={"grpo"})  # GRPO's options do not apply
    except TrainingError as err:
        raise ValidationError({"sft": [str(err)]}) from None


def _conversations_fit(*, dataset_version: DatasetVersion, model: str) -> None:
    """As GRPO's launch refuses a scenario the model's context cannot hold: every conversation of the version
    must fit the model it will train (one checked at upload against another model may not)."""
    from training.sft.data import parse_jsonl
    from webapp.selectors.datasets import dataset_version_jsonl
    from webapp.services.dataset_fit import conversations_over_context

    conversations, _ = parse_jsonl("".join(dataset_version_jsonl(version=dataset_version)))
    problems, _ = conversations_over_context(model=model, conversations=conversations,
                                             places=[f"{dataset_version}, conversation {i + 1}"
                                                     for i in range(len(conversations))])
    if problems:
        raise ValidationError({"dataset": problems})


def sft_engine_config(*, run: Run, config: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The config a worker starts an SFT run's engine with: the run's dataset version written to DATA_FILE in
    the run's output directory, named as its data file. Other runs' configs are returned as they are."""
    if config.get("kind") != "sft":
        return config
    if run.dataset_version_id is None:
        raise ValueError("this SFT run names no dataset version")
    from webapp.selectors.datasets import dataset_version_jsonl

    path = directory / DATA_FILE
    partial = path.with_suffix(".partial")
    with open(partial, "w", encoding="utf-8") as out:
        for line in dataset_version_jsonl(version=run.dataset_version):
            out.write(line)
    partial.replace(path)
    return {**config, "sft": {**(config.get("sft") or {}), "data_file": str(path), "conversations": None}}
