"""Who sets what in a run's engine config (training.config.RunConfig), and what people are shown of it.

DESIGN invariant 7: nothing a project member types becomes a host, a URL, a port, a path, an interpreter, a
server kind, a device a worker trusts or a checkpoint. So a launch's (or a fork's) "Advanced (JSON)" reaches
the engine through ALLOWED_OVERRIDES, training settings key by key; every other key is refused whatever its
value, with the reason REFUSED_BECAUSE gives. The rest of the config comes from the form, the agent, the
scenario set, the judge, the fork's checkpoint (resolved by id on the server) and the deployment:
STUDIO_RUN_WORKER_CONFIG (WORKER_KEYS) for the inference server and the devices, STUDIO_RUNS_DIR for the paths.

The allow-list applies to what a person sends, not to stored configs: a run is a snapshot (invariant 1), so a
run launched before a key was refused still shows, resumes and forks as it was stored.

Pure Python (no Django), so settings.py can parse STUDIO_RUN_WORKER_CONFIG at start and fail loudly.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from training.config import RunConfig, ServerConfig, describe_validation_error

ALLOWED_OVERRIDES: frozenset[str] = frozenset({
    # the run's length, randomness and tolerance of failures
    "steps", "seed", "checkpoint_every", "max_rollout_failures", "max_scoring_failures",
    # which checkpoints outlive the run (served, forked or exported ones always do)
    "retention.keep_last", "retention.keep_best",
    # how the agent's answers are sampled
    "sampling.temperature", "sampling.top_p", "sampling.max_tokens", "sampling.ignore_eos",
    # whether a reasoning model (Qwen3) thinks: its chat family is the model catalogue's
    "chat.reasoning",
    # the adapter
    "lora.r", "lora.alpha", "lora.dropout", "lora.target_modules",
    # GRPO
    "grpo.group_size", "grpo.groups_per_step", "grpo.learning_rate", "grpo.scale_rewards", "grpo.std_floor",
    "grpo.eps_low", "grpo.eps_high", "grpo.beta", "grpo.max_grad_norm", "grpo.weight_decay", "grpo.adam_betas",
    "grpo.micro_batch_size", "grpo.micro_batch_tokens", "grpo.epochs_per_step",
    # the trainer's numerics and memory (where it runs is the deployment's)
    "trainer.dtype", "trainer.gradient_checkpointing", "trainer.attn_implementation", "trainer.load_in_4bit",
    "trainer.logprob_chunk_tokens", "trainer.tis_cap",
    # pipelined steps
    "pipeline.enabled", "pipeline.tis_cap",
    # held-out evaluation (which scenarios are held out is the scenario set's validation split)
    "evaluation.held_out_fraction", "evaluation.every", "evaluation.samples", "evaluation.temperature",
    # reward-hacking and health monitors
    "monitors.window", "monitors.max_length_growth", "monitors.ngram", "monitors.max_repeat_rate",
    "monitors.max_empty_rate", "monitors.min_divergence", "monitors.max_kl", "monitors.max_zero_variance",
    "monitors.pause_on", "monitors.max_truncated", "monitors.min_entropy", "monitors.stall_steps",
})

_DEPLOYMENT = "is the deployment's (STUDIO_RUN_WORKER_CONFIG), not a run's"
# Why a key outside ALLOWED_OVERRIDES is refused (the longest dotted prefix that matches): messages only, the
# decision is the allow-list's.
REFUSED_BECAUSE: dict[str, str] = {
    "": "it is not a training setting a person may change",
    "name": "the run's name is the form's Name",
    "kind": "the run's kind is the launch form's choice: Reinforce (GRPO) or Teach (SFT)",
    "sft": "an SFT run's options are the launch form's fields, and its data a dataset version of this project",
    "base_model": "it is the agent's: change it on the agent (a fork keeps its parent's)",
    "base_model_name": "it is the agent's: change it on the agent (a fork keeps its parent's)",
    "system_prompt": "it is the agent's: change it on the agent (a fork keeps its parent's)",
    "chat": "the model's chat family is the deployment's model catalogue's (its entry's chat_template); a run "
            "chooses chat.reasoning only",
    "environment": "the environment is the agent's (its kind, tools, MCP server and options): change it on the agent",
    "scenarios": "the scenarios are the scenario set's",
    "scenarios_file": "it names a file on the worker; the scenarios are the scenario set's",
    "evaluation.held_out_ids": "the held-out scenarios are the scenario set's validation split",
    "judge": "choose a judge and a rubric in the form",
    "server": f"the inference server (its kind, address, port, interpreter, flags and GPUs) {_DEPLOYMENT}",
    "device": f"where the trainer runs {_DEPLOYMENT}",
    "trainer.distributed": f"how many processes train, on which GPUs, {_DEPLOYMENT}",
    "trainer.gpus": f"how many processes train, on which GPUs, {_DEPLOYMENT}",
    "trainer.processes": f"how many processes train, on which GPUs, {_DEPLOYMENT}",
    "trainer.require_gpu": f"whether a worker may train on its CPU {_DEPLOYMENT}",
    "trainer.collective_timeout_s": f"how long the training processes wait on each other {_DEPLOYMENT}",
    "trackers": "where a run reports is the site's: choose among the trackers it offers with the launch form's "
                "Report to (or the API's `trackers`)",
    "output_dir": "it is a path on the worker: every run gets a directory of its own under STUDIO_RUNS_DIR",
    "init_checkpoint": "it is a path on the worker: fork a checkpoint of this project instead (its Fork button, "
                       "or POST /api/runs/<id>/fork/ with the step)",
}

# What STUDIO_RUN_WORKER_CONFIG may set on every run: the inference server (but its interpreter and flags, which
# are the worker's own VLLM_PYTHON and VLLM_EXTRA_ARGS) and where the trainer runs.
WORKER_KEYS: frozenset[str] = frozenset(
    {f"server.{name}" for name in ServerConfig.model_fields if name not in ("python", "extra_args")}
    | {"device", "trainer.distributed", "trainer.gpus", "trainer.processes", "trainer.require_gpu",
       "trainer.collective_timeout_s"})

# Worker paths and addresses: kept in the stored config for the worker, never shown to people.
HIDDEN_FROM_PEOPLE: tuple[str, ...] = ("output_dir", "init_checkpoint", "scenarios_file", "sft.data_file",
                                       "server.url", "server.host", "server.port", "server.python",
                                       "server.extra_args", "trackers.wandb.dir", "trackers.mlflow.tracking_uri",
                                       "trackers.langfuse.host",
                                       # a stdio MCP server of the deployment's catalogue: its program's path,
                                       # arguments and environment (which may hold the deployment's keys)
                                       "environment.options.server.command", "environment.options.server.args",
                                       "environment.options.server.env")


def _sections(model: type[BaseModel]) -> dict[str, Any]:
    """The config's shape: {field: nested shape} for a section, {field: None} for a setting."""
    shape: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        kind = info.annotation
        shape[name] = _sections(kind) if isinstance(kind, type) and issubclass(kind, BaseModel) else None
    return shape


ENGINE_SHAPE = _sections(RunConfig)


def _reason(key: str) -> str:
    prefixes = [p for p in REFUSED_BECAUSE if p == "" or key == p or key.startswith(p + ".")]
    return REFUSED_BECAUSE[max(prefixes, key=len)]


_FREE_FORM = {"judge", "environment.options"}  # dict-valued settings: the keys inside them are named too


def _refused(key: str, value: Any, shape: Any) -> list[str]:
    """Names what was sent under a refused key: each setting of a section, and each key inside a free-form
    setting (so `{"environment": {"options": {"server": …}}}` is named environment.options.server)."""
    if isinstance(value, dict) and value:
        if isinstance(shape, dict):
            return [problem for sub, inner in value.items()
                    for problem in _refused(f"{key}.{sub}", inner, shape.get(str(sub)))]
        if shape is None and key in _FREE_FORM:
            return [f"{key}.{sub} cannot be set here: {_reason(key)}" for sub in value]
    return [f"{key} cannot be set here: {_reason(key)}"]


def override_problems(overrides: Mapping[str, Any], prefix: str = "",
                      shape: Mapping[str, Any] | None = ENGINE_SHAPE) -> list[str]:
    """One sentence per key of a person's overrides that may not be set, naming its dotted key; [] when every
    key is in ALLOWED_OVERRIDES. Values are the engine's to check (RunConfig, after the merge)."""
    problems: list[str] = []
    for raw_key, value in overrides.items():
        name = str(raw_key)
        key, sub_shape = f"{prefix}{name}", (shape or {}).get(name)
        if key in ALLOWED_OVERRIDES:
            continue
        if any(allowed.startswith(key + ".") for allowed in ALLOWED_OVERRIDES):  # a section with settings to set
            if isinstance(value, dict):
                problems += override_problems(value, key + ".", sub_shape)
            else:
                problems.append(f"{key}: give an object of its settings, e.g. {{\"{key}\": {{…}}}}")
        elif shape is not None and name not in shape and not any(key == p or key.startswith(p + ".")
                                                                    for p in REFUSED_BECAUSE if p):
            problems.append(f"{key}: Extra inputs are not permitted (not a setting of the engine)")
        else:
            problems += _refused(key, value, sub_shape)
    return problems


def parse_worker_config(raw: str, *, variable: str = "STUDIO_RUN_WORKER_CONFIG") -> dict[str, Any]:
    """The deployment's part of every run's config, from JSON: only WORKER_KEYS, valid for the engine."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as err:
        raise ValueError(f"{variable} is not valid JSON: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{variable} must be a JSON object, e.g. {{\"server\": {{\"kind\": \"vllm\"}}}}")
    stray = [key for key in _leaves(value) if key not in WORKER_KEYS]
    if stray:
        raise ValueError(f"{variable} sets {', '.join(stray)}; it may set only {', '.join(sorted(WORKER_KEYS))}")
    try:
        RunConfig.model_validate({"base_model": "check", "scenarios": [{"id": "s", "user_message": "m"}], **value})
    except ValidationError as err:
        raise ValueError(f"{variable}: {describe_validation_error(err)}") from None
    return value


def _leaves(value: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name, sub in value.items():
        key = f"{prefix}{name}"
        # server and trainer are sections; a dict anywhere else is one setting's value
        keys += _leaves(sub, key + ".") if isinstance(sub, dict) and key in ("server", "trainer") else [key]
    return keys


def config_for_people(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config as pages and the API show it: without HIDDEN_FROM_PEOPLE (worker paths and addresses)."""
    shown = copy.deepcopy(dict(config))
    for key in HIDDEN_FROM_PEOPLE:
        *sections, last = key.split(".")
        where: Any = shown
        for section in sections:
            where = where.get(section) if isinstance(where, dict) else None
        if isinstance(where, dict):
            where.pop(last, None)
    return shown


def text_for_people(text: str, *, paths: Iterable[tuple[str, str]]) -> str:
    """`text` (an engine's error, a log's tail) with each (worker path, what to say instead) replaced."""
    for path, instead in sorted(((p, i) for p, i in paths if p), key=lambda pi: -len(pi[0])):
        text = text.replace(path, instead)
    return text


def worker_paths(config: Mapping[str, Any], *, runs_dir: str) -> list[tuple[str, str]]:
    """The worker paths a run's messages may quote, each with what people read instead (text_for_people)."""
    return [(str(config.get("output_dir") or ""), "<the run's directory>"),
            (str(config.get("init_checkpoint") or ""), "<the parent's checkpoint>"),
            (str(runs_dir), "<the runs directory>")]
