"""Checks of a run's base model before anything starts: it exists, it loads, it fits the run's settings.

Cheap by design (the model's config and file names only, never its weights) so the web app can call it inside
a launch request and the command line before a run: a wrong model fails in a second, with a plain reason,
instead of after a worker started the server. Offline only: a hub id must already be in the local Hugging Face
cache, as the workers cannot download either.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from training.config import ChatConfig, RunConfig

# Any one of these is a tokenizer transformers can load (fast, sentencepiece or BPE vocabularies).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _looks_like_path(name: str) -> bool:
    """A hub id is `name` or `org/name`; anything else (absolute, ./, ~, deeper) can only be a directory."""
    return (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
            or os.sep != "/" and os.sep in name)


def _hub_cached(repo_id: str, filename: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except ValueError:  # not a valid repo id
        return False


def _load_config(name: str, where: str):
    """(config, None), or (None, why it would not load)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name, local_files_only=True), None
    except Exception as err:  # noqa: BLE001 -- files on disk are untrusted: a failure to load is a reason
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return None, f"base model {name}: {where} has no loadable config.json ({first[:200]})"


def preflight(config: RunConfig, *, tools: list[dict[str, Any]] | None = None) -> list[str]:
    """The problems with `config`'s base model as plain sentences; empty when the run may start. `tools`: the
    tools the agent is given when its options alone do not say (an MCP server's, as last listed)."""
    name = config.base_model.strip()
    workers = "the workers that run training need it too"
    directory = Path(name).expanduser()
    if directory.is_dir():
        found, problem = _load_config(str(directory), f"the directory {name}")
        has_tokenizer = any((directory / f).is_file() for f in TOKENIZER_FILES)
    elif _looks_like_path(name):
        return [f"base model {name}: no such directory on this machine ({workers})"]
    else:
        from huggingface_hub import constants

        found, problem = _load_config(name, "the local Hugging Face cache") if _hub_cached(name, "config.json") \
            else (None, f"base model {name}: neither a directory here nor a model in the local Hugging Face cache "
                        f"({constants.HF_HUB_CACHE}); runs download nothing, so fetch it beforehand; {workers}")
        has_tokenizer = any(_hub_cached(name, f) for f in TOKENIZER_FILES)
    if found is None:
        return [problem]
    problems = []
    if not has_tokenizer:
        problems.append(f"base model {name}: no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    problems += _fits(found, config)
    if not problems:
        problems += _prompt_fits(found, config, str(directory) if directory.is_dir() else name, tools)
    if config.init_checkpoint and (Path(config.init_checkpoint) / "adapter_config.json").is_file():
        from training.model.checkpoints import adapter_mismatches

        problems += [f"fork: {p}" for p in adapter_mismatches(config.lora, Path(config.init_checkpoint))]
    return problems


def _fits(model_config, config: RunConfig) -> list[str]:
    """What about the model does not fit the run: it must generate text, with room for the answers asked for."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = config.base_model
    problems = []
    architectures = getattr(model_config, "architectures", None) or []
    if model_config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and \
            not any(a.endswith("ForCausalLM") for a in architectures):
        problems.append(f"base model {name}: a {model_config.model_type} model does not generate text "
                        "(training needs a causal language model)")
    text = getattr(model_config, "text_config", None) or model_config
    context = getattr(text, "max_position_embeddings", None)
    if isinstance(context, int) and config.sampling.max_tokens > context:
        problems.append(f"sampling.max_tokens {config.sampling.max_tokens} is more than base model {name} can "
                        f"hold ({context} tokens of context); lower the agent's max tokens")
    return problems


def _prompt_fits(model_config: Any, config: RunConfig, name: str, tools: list[dict[str, Any]] | None) -> list[str]:
    """The opening prompt of the longest scenario, with its tools, plus max_tokens, within the context."""
    from training.model.prompt_budget import environment_tools
    from training.environments.scenarios import load_scenarios

    if config.environment.kind == "external":  # an external client writes its own prompts
        return []
    try:
        given = tools if tools is not None else environment_tools(config.environment.kind, config.environment.options)
        scenarios = load_scenarios(config)
    except Exception:  # noqa: BLE001 -- the environment and scenario checks say what is wrong with these
        return []
    budget, why = model_prompt_budget(name, model_config=model_config, system_prompt=config.system_prompt,
                                      tools=given, scenarios=scenarios, max_tokens=config.sampling.max_tokens,
                                      chat=config.chat)
    if why:
        return [f"base model {config.base_model}: {why}"]
    return [problem] if budget is not None and (problem := budget.problem()) else []


def model_prompt_budget(name: str, *, system_prompt: str, tools: list[dict[str, Any]] | None,
                        scenarios: list[Any], max_tokens: int, model_config: Any = None,
                        chat: ChatConfig | None = None) -> tuple[Any, str | None]:
    """(PromptBudget, None) for base model `name` (a directory or a cached hub id, read offline), or (None, why
    it cannot be counted). `model_config`: its already loaded config, if the caller has it; `chat`: the run's
    ChatConfig (its family and reasoning change the prompt)."""
    from training.model.prompt_budget import prompt_budget

    counter, why = model_counter(name, model_config=model_config)
    if counter is None:
        return None, why
    tokenizer, context = counter
    return prompt_budget(tokenizer, context=context, system_prompt=system_prompt, tools=tools, scenarios=scenarios,
                         max_tokens=max_tokens, chat=chat), None


def model_counter(name: str, *, model_config: Any = None) -> tuple[tuple[Any, int] | None, str | None]:
    """((tokenizer, context), None) for base model `name`, read offline; or (None, why not)."""
    from transformers import AutoTokenizer

    from training.model.prompt_budget import model_context

    name = str(Path(name).expanduser()) if Path(name).expanduser().is_dir() else name.strip()
    if model_config is None:
        if not Path(name).is_dir() and (_looks_like_path(name) or not _hub_cached(name, "config.json")):
            return None, f"base model {name}: neither a directory here nor a model in the local Hugging Face cache"
        model_config, problem = _load_config(name, "the model")
        if model_config is None:
            return None, problem
    context = model_context(model_config)
    if context is None:
        return None, "its config does not say how many tokens it holds"
    try:
        return (AutoTokenizer.from_pretrained(name, local_files_only=True), context), None
    except Exception as err:  # noqa: BLE001 -- files on disk are untrusted: a failure to load is a reason
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return None, f"cannot count the prompt's tokens ({first[:200]})"
