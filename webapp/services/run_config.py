"""Building a run's engine config from the catalogue, validated by the engine's own pydantic model."""
from __future__ import annotations

import copy
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from webapp.model_catalogue import BaseModelChoiceError, ResolvedModel, resolve_base_model
from webapp.models import Agent, Checkpoint, JudgeConfig, RubricVersion, Scenario, ScenarioSet
from webapp.run_policy import override_problems
from webapp.services.config_merge import deep_merge
from webapp.services.mcp_servers import mcp_agent_environment_options

# Launch-form defaults sized for a CPU laptop; the advanced JSON can change the training settings of
# webapp/run_policy.py's ALLOWED_OVERRIDES.
DEFAULT_STEPS = 10
DEFAULT_GROUP_SIZE = 4
DEFAULT_GROUPS_PER_STEP = 2
DEFAULT_LEARNING_RATE = 1e-5


def config_name(name: str) -> str:
    """The engine's name is also an adapter prefix, so it must be a safe identifier."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"
    return slug[:60]


def judge_options(*, judge: JudgeConfig, rubric_text: str | None, criteria: list[dict[str, Any]] | None,
                  api_key_env: str | None, model: str | None = None, temperature: float | None = None,
                  passes: int | None = None) -> dict[str, Any]:
    """The `judge` section of the engine config (options of studio.scoring.judge_scorer_from_config): the one
    place a judge's settings become scorer options, for runs and the playground alike (its litellm parameters
    are then built in one place too, studio.scoring.judge_litellm_params). `model`, `temperature` and
    `passes` override the judge's own (the playground's candidates). Every set value is kept, 0 included.

    The key itself never goes in: only the name of the environment variable the engine will read."""
    temperature = judge.temperature if temperature is None else temperature
    options: dict[str, Any] = {"judge_model": model or judge.model,
                               "passes": judge.passes if passes is None else passes,
                               "concurrency": judge.concurrency}
    if judge.api_base:
        options["api_base"] = judge.api_base
    if api_key_env:
        options["api_key_env"] = api_key_env
    if temperature is not None:
        options["temperature"] = temperature
    if rubric_text is not None:
        options["rubric"] = rubric_text
    if criteria:
        options["criteria"] = criteria
    return options


def run_config_build(*, name: str, agent: Agent, scenario_set: ScenarioSet | None,
                     rubric_version: RubricVersion | None, judge: JudgeConfig | None, steps: int, group_size: int,
                     groups_per_step: int, learning_rate: float, seed: int = 0,
                     overrides: dict[str, Any] | None = None, parent: Checkpoint | None = None,
                     kind: str = "grpo") -> dict[str, Any]:
    """Returns RunConfig.model_dump(mode="json"); raises ValidationError naming the bad key. `overrides`: what a
    person sent, training settings only (webapp/run_policy.py). `parent`: a fork's checkpoint: the run starts from
    its adapter, its path read here, with the parent's model, prompt, environment (its frozen MCP server
    included), sampling and adapter shape as the parent's config froze them. The inference server and the
    devices are the deployment's (STUDIO_RUN_WORKER_CONFIG); the output directory is a new one under
    STUDIO_RUNS_DIR. `kind="sft"`: the scenarios only serve its held-out win rate, so it may have none (no
    scenario set, or one without training scenarios); services/sft_runs.py makes the SFT config of it."""
    from training import TrainingError
    from training.config import parse_run_config

    if overrides and (problems := override_problems(overrides)):
        raise ValidationError({"overrides": problems})  # before anything is read or merged
    scenarios = [
        {"id": s.external_id, "user_message": s.user_message, "context": s.context or None,
         "reference": s.reference or None, "metadata": s.metadata}
        for s in (scenario_set.scenarios.filter(split=Scenario.Split.TRAIN, retired=False).order_by("id")
                  if scenario_set is not None else [])
    ]
    if scenario_set is None and kind != "sft":
        raise ValidationError({"scenario_set": ["choose the scenario set the run rolls out"]})
    if not scenarios and kind != "sft":
        raise ValidationError({"scenario_set": ["this scenario set has no training scenarios; add or upload some"]})
    # Validation scenarios are the held-out set: never trained on, answered by checkpoint and base at evaluations.
    held_out = [
        {"id": s.external_id, "user_message": s.user_message, "context": s.context or None,
         "reference": s.reference or None, "metadata": s.metadata}
        for s in (scenario_set.scenarios.filter(split=Scenario.Split.VALIDATION).order_by("id")
                  if scenario_set is not None else [])
    ]
    if judge is None and rubric_version is not None:
        raise ValidationError({"judge_config": ["a rubric needs a judge to apply it; choose a judge or no rubric"]})
    api_key_env = judge.api_key_env or ("STUDIO_JUDGE_API_KEY" if judge.has_stored_key else None) if judge else None
    # The run freezes what the agent's model means today (the workers load `base_model`); a fork takes its
    # parent's, below, whatever the agent names now.
    model = None if parent is not None else agent_base_model_resolve(agent=agent)
    data: dict[str, Any] = {
        "name": config_name(name),
        "base_model": model.source if model else "",
        "base_model_name": model.name if model else None,
        # The catalogue names the chat family of a model whose template is not recognised (training/model/chat_templates).
        "chat": {"family": model.chat_template} if model and model.chat_template else {},
        "system_prompt": agent.system_prompt,
        "scenarios": scenarios,
        "sampling": {"temperature": agent.temperature, "top_p": agent.top_p, "max_tokens": agent.max_tokens},
        "grpo": {"group_size": group_size, "groups_per_step": groups_per_step, "learning_rate": learning_rate},
        "steps": steps,
        "seed": seed,
        # the deployment's checkpoint retention, frozen into the run (a launch's overrides may change it)
        "retention": {"keep_last": settings.STUDIO_CHECKPOINT_KEEP_LAST},
        "output_dir": str(settings.STUDIO_RUNS_DIR / f"{config_name(name)}-{uuid.uuid4().hex[:12]}"),
        "judge": judge_options(judge=judge, rubric_text=rubric_version.text if rubric_version else None,
                               criteria=rubric_version.criteria if rubric_version else None,
                               api_key_env=api_key_env) if judge else None,
    }
    if model and model.tool_parser:  # the catalogue's tool-call parser for the model (vLLM's --tool-call-parser)
        data["server"] = {"tool_call_parser": model.tool_parser}
    if parent is not None:
        # The adapter belongs to the model, prompt and environment the parent trained, whatever the agent has
        # been edited to since; a stored config is a snapshot, so its values are taken as stored.
        data.update({key: copy.deepcopy(parent.run.config[key]) for key in FORK_CARRIED if key in parent.run.config})
        data["init_checkpoint"] = parent.path
    else:
        data["environment"] = {"kind": agent.environment_kind, "options": (
            mcp_agent_environment_options(agent=agent) if agent.environment_kind == "mcp"
            else agent.environment_options or {})}
    if held_out:
        data["scenarios"] = scenarios + held_out
        data["evaluation"] = {"held_out_ids": [h["id"] for h in held_out]}
    if kind == "sft":  # trains on conversations: no scenario to roll out is needed (sft_run_config completes it)
        data["kind"] = "sft"
    data = deep_merge(data, copy.deepcopy(settings.STUDIO_RUN_WORKER_CONFIG))  # copies: _serve_the_adapter writes
    data = deep_merge(data, copy.deepcopy(overrides or {}))
    _serve_the_adapter(data)
    try:
        config = parse_run_config(data)
    except TrainingError as err:
        raise ValidationError({"overrides": [str(err)]}) from None
    _refuse_worker_code(config)
    return config.model_dump(mode="json")


# What a fork takes from its parent's frozen config (the rest is the fork's form, overrides and deployment).
FORK_CARRIED = ("base_model", "base_model_name", "chat", "system_prompt", "environment", "lora", "sampling")


def agent_base_model_resolve(*, agent: Agent) -> ResolvedModel:
    """The deployment's model the agent names (webapp/model_catalogue.py); for anything else, e.g. a path
    stored before the catalogue, a ValidationError beside the launch's agent that says to choose a model."""
    try:
        return resolve_base_model(agent.base_model)
    except BaseModelChoiceError as err:
        raise ValidationError({"agent": [f"agent {agent.name}: {err}"]}) from None


def _serve_the_adapter(data: dict[str, Any]) -> None:
    """The inference server accepts adapters up to server.max_lora_rank, which is the deployment's: raised to the
    run's own lora.r, else a person's rank above it would be refused for a setting they cannot change."""
    rank = (data.get("lora") or {}).get("r", 8)
    server = data.setdefault("server", {})
    if isinstance(server, dict) and isinstance(rank, int) and not isinstance(rank, bool):
        server["max_lora_rank"] = max(int(server.get("max_lora_rank") or 8), rank)


def _refuse_worker_code(config: Any) -> None:
    """An agent's custom tools name code the worker imports: only from modules the worker allows."""
    problems = []
    allowed = settings.STUDIO_TOOL_MODULES
    for tool in config.environment.options.get("custom_tools") or []:
        module = str(tool.get("function", "") if isinstance(tool, dict) else "").partition(":")[0]
        if not any(module == m or module.startswith(m + ".") for m in allowed):
            problems.append(f"custom tool {module!r} is not in a module the worker allows (STUDIO_TOOL_MODULES: "
                            f"{', '.join(allowed) or 'none'})")
    if problems:
        raise ValidationError({"agent": problems})


def run_model_problems(*, config: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> list[str]:
    """training.model.preflight on a built run config: the base model exists, loads and fits (its prompt and answers
    too), in plain sentences. `tools`: an mcp agent's tools as last listed (the config names only the server)."""
    from training.config import parse_run_config
    from training.model.preflight import preflight

    return preflight(parse_run_config(config), tools=tools)


def _launch_model_problems(*, config: dict[str, Any], tools: list[dict[str, Any]] | None) -> list[str]:
    """run_model_problems at launch. A hub model the workers fetch (webapp/execution/model_fetch.py) is checked
    in their shared cache when it is there already; when it is not, the worker checks it after fetching it."""
    from training.model.hub import cached_snapshot
    from webapp.model_catalogue import hub_model

    if (repo_id := hub_model(config)) is None:
        return _named(run_model_problems(config=config, tools=tools), config)
    if (snapshot := cached_snapshot(repo_id, settings.STUDIO_MODEL_CACHE_DIR)) is None:
        return []
    return [p.replace(str(snapshot), repo_id) for p in
            run_model_problems(config={**config, "base_model": str(snapshot)}, tools=tools)]


def _named(problems: list[str], config: dict[str, Any]) -> list[str]:
    """The launch page names a catalogue model by its catalogue name, never the worker's path to it; a shipped
    tiny model (the demo's, the games'), when it is not built yet, says how to build it."""
    from webapp.model_catalogue import BUILD_HINTS

    name, path = config.get("base_model_name"), str(config.get("base_model") or "")
    if not name or not path:
        return problems
    hint = f"; {BUILD_HINTS[name]}" if name in BUILD_HINTS else ""
    return [p.replace(path, name) + (hint if "no such directory" in p else "") for p in problems]


def judge_key_problem(*, judge: JudgeConfig | None, environ: Mapping[str, str], where: str) -> str | None:
    """Why the judge's key variable cannot be read in `environ` (the environment runs execute in), or None."""
    name = judge.api_key_env if judge is not None else ""
    if not name or environ.get(name):
        return None
    return (f"the judge's key variable {name} is not set {where}; set it there (and restart) or store the key "
            "on the judge")


def run_launch_check(*, config: dict[str, Any], judge: JudgeConfig | None,
                     tools: list[dict[str, Any]] | None = None) -> None:
    """The launch's checks of what a worker will need; raises ValidationError beside the field to change.
    With the embedded executor this process is the worker, so its own environment is the one to check.
    `tools`: the agent's tools when its config only names where they come from (an MCP server's listing)."""
    from training.environments import needs_judge

    errors: dict[str, list[str]] = {}
    environment = config.get("environment") or {}
    # An SFT run scores answers only for its held-out win rate: without held-out scenarios it needs no judge.
    scored = config.get("kind") != "sft" or bool(config.get("scenarios"))
    if judge is None and scored and needs_judge(environment.get("kind", ""), environment.get("options") or {}):
        errors["judge_config"] = [f"this agent's environment ({environment.get('kind')}) gives its answers no "
                                  "reward of its own: choose a judge to score them"]
    if settings.STUDIO_MODEL_CHECK == "launch" and (problems := _launch_model_problems(config=config, tools=tools)):
        errors["agent"] = problems
    if settings.STUDIO_MODEL_CHECK == "launch" and not errors.get("agent"):
        from webapp.services.gpu_plans import run_config_memory_refusal

        if refusal := run_config_memory_refusal(config=config):  # the workers' GPUs cannot hold it: say what would
            errors["memory_plan"] = [refusal]
    if settings.STUDIO_EXECUTOR == "inprocess" and (problem := judge_key_problem(
            judge=judge, environ=os.environ, where="in the web app's environment, where its runs execute")):
        errors["judge_config"] = [problem]
    if errors:
        raise ValidationError(errors)
