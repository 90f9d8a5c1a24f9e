"""The chat template a vLLM server is started with: the family's training template, so vLLM samples every turn
from the prompt the trainer renders for it (the local server installs it on its tokenizer instead)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training.model.chat_templates.families import family_of, training_template


def _model_file(base_model: str, name: str) -> Path | None:
    """A file of the base model: in its directory, or in the local Hugging Face cache (never downloaded here)."""
    path = Path(base_model).expanduser() / name
    if path.is_file():
        return path
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(base_model, name)
    except (ImportError, ValueError):  # no hub client, or not a repo id
        return None
    return Path(cached) if isinstance(cached, str) else None


def model_chat_template(base_model: str) -> str | None:
    """The chat template the model ships: chat_template.jinja, else tokenizer_config.json's (its default one)."""
    jinja = _model_file(base_model, "chat_template.jinja")
    if jinja is not None:
        return jinja.read_text()
    config = _model_file(base_model, "tokenizer_config.json")
    if config is None:
        return None
    try:
        template: Any = json.loads(config.read_text()).get("chat_template")
    except (OSError, ValueError):
        return None
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    return template if isinstance(template, str) else None


def vllm_chat_template_args(base_model: str, directory: Path, *, family: str | None = None,
                            reasoning: str = "keep") -> list[str]:
    """`--chat-template FILE` for a family with a training variant (written into `directory`, beside the server's
    log: vLLM reads a template given as text through unicode_escape); nothing where the model's own serves."""
    found = family_of(model_chat_template(base_model), name=family)
    template = training_template(found, reasoning) if found is not None else None  # type: ignore[arg-type]
    if not template:
        return []
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "chat_template.jinja"
    path.write_text(template)
    return ["--chat-template", str(path)]
