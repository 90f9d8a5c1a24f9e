"""Chat formats of the model families users bring: Qwen3, Qwen2.5, Llama 3.x, Gemma 3 and Mistral.

What it holds: the families (`families`), their prefix-stable training templates (`variants`) and their
tool-call formats (`tool_calls`). A tokenizer is matched to its family by its chat template's fingerprint
(or a name the deployment's model catalogue gives); `install` then gives it the family's training template,
so the inference server samples each turn with exactly the tokens the trainer later renders for it, and past
turns stay as they were sampled. `training.model.chat_format` masks the assistant's tokens on top of it.
Imports: the standard library and training.types (no transformers: templates are text); `serving` imports
huggingface_hub lazily, to read a model's template from the local cache.
"""
from __future__ import annotations

from training.model.chat_templates.families import (
    FAMILIES,
    REASONING_CHOICES,
    Family,
    family_of,
    install,
    installed_family,
    prepare_messages,
    training_template,
)

__all__ = ["FAMILIES", "REASONING_CHOICES", "Family", "family_of", "install", "installed_family",
           "prepare_messages", "training_template"]
