"""Checks of a run's base model before anything starts: it exists, it loads, it fits the run's settings.

Cheap by design (the model's config and file names only, never its weights) so the web app can call it inside
a launch request and the command line before a run: a wrong model fails in a second, with a plain reason,
instead of after a worker started the server. Offline only: a hub id must already be in the local Hugging Face
cache, as the workers cannot download either.
"""
from __future__ import annotations

import os
from pathlib import Path

from training.config import RunConfig

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


def preflight(config: RunConfig) -> list[str]:
    """The problems with `config`'s base model as plain sentences; empty when the run may start."""
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
