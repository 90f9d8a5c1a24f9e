"""The model families whose chat formats the engine knows, and how a model is matched to one.

A family names its training template (a variant from `variants`, or None where the model's own template is
already prefix-stable), its end-of-turn marker, its tool-call format (the vLLM parser of the same name) and
how OpenAI-style messages are shaped before its template sees them (`prepare_messages`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Literal

from training.config import CHAT_FAMILIES
from training.model.chat_templates import tool_calls, variants
from training.types import TrainingError

Reasoning = Literal["keep", "drop"]
REASONING_CHOICES = ("keep", "drop")


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    end_of_turn: str  # the marker that closes an assistant turn in this family's template
    tool_format: str  # a key of tool_calls.FORMATS; also vLLM's --tool-call-parser for the family
    model_types: tuple[str, ...]  # config.json model_type values of the family
    # Substrings that all occur in the family's published template (and its variant), specific enough that a
    # template merely written with the family's tokens is not taken for it: that one is used as it is.
    fingerprint: tuple[str, ...]
    template: Callable[[str], str] | None  # the training variant for a reasoning setting; None: the model's own
    reasoning: bool = False  # whether the family has a reasoning block the run setting applies to


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("qwen3", "Qwen3 (thinking and not): ChatML turns, <think> reasoning, Hermes-style <tool_call> blocks",
           "<|im_end|>", "hermes", ("qwen3", "qwen3_moe"),
           ("<|im_start|>", "<think>", "reasoning_content", "<tool_call>"), variants.qwen3, reasoning=True),
    Family("qwen2_5", "Qwen2.5: ChatML turns, a default system prompt, Hermes-style <tool_call> blocks",
           "<|im_end|>", "hermes", ("qwen2",),
           ("<|im_start|>", "<tool_call>", "You are Qwen, created by Alibaba Cloud."), None),
    Family("llama3", "Llama 3.x: header-delimited turns, tools in the first user turn, JSON calls",
           "<|eot_id|>", "llama3_json", ("llama",), ("<|start_header_id|>", "<|eot_id|>", "Cutting Knowledge Date"),
           None),
    Family("gemma3", "Gemma 3: user/model turns, the system prompt in the first user turn, pythonic calls",
           "<end_of_turn>", "pythonic", ("gemma3", "gemma3_text"),
           ("<start_of_turn>", "<end_of_turn>", "first_user_prefix"), lambda reasoning: variants.GEMMA3),
    Family("mistral", "Mistral (Nemo-style): [INST] turns, [AVAILABLE_TOOLS], [TOOL_CALLS] JSON lists",
           "</s>", "mistral", ("mistral",), ("[INST]", "[TOOL_CALLS]", '"call_id": "'),
           lambda reasoning: variants.MISTRAL),
)}


def family_of(template: str | None, *, model_type: str | None = None, name: str | None = None) -> Family | None:
    """The family of a model: the catalogue's `name` if it gives one, else the template's fingerprint.

    A template that matches no family is the model's own business (it is used as it is, and must be
    prefix-stable). `model_type` only names the family of a model that brings no chat template at all, to say
    which template it lacks; a template's fingerprint wins over it (a fine-tune may change its format).
    """
    if name:
        if name not in FAMILIES:
            raise TrainingError(f"unknown chat family {name!r}: choose one of {', '.join(FAMILIES)}")
        return FAMILIES[name]
    if template:
        for family in FAMILIES.values():
            if all(mark in template for mark in family.fingerprint):
                return family
        return None
    for family in FAMILIES.values():
        if model_type in family.model_types:
            raise TrainingError(f"the model is a {family.name} model but its tokenizer has no chat template: "
                                f"give it the family's published template (tokenizer_config.json)")
    return None


def training_template(family: Family, reasoning: Reasoning = "keep") -> str | None:
    if reasoning not in REASONING_CHOICES:
        raise TrainingError(f"reasoning must be one of {', '.join(REASONING_CHOICES)}, not {reasoning!r}")
    return family.template(reasoning) if family.template else None


def install(tokenizer: Any, *, name: str | None = None, reasoning: Reasoning = "keep",
            model_type: str | None = None) -> Family | None:
    """Gives `tokenizer` its family's training template, so the server samples with the template the trainer
    renders (the same tokens on both sides), and marks the tokenizer with its family."""
    family = family_of(getattr(tokenizer, "chat_template", None), model_type=model_type, name=name)
    if family is None:
        return None
    template = training_template(family, reasoning)
    if template is not None:
        tokenizer.chat_template = template
    tokenizer.studio_chat_family = family.name
    return family


def installed_family(tokenizer: Any) -> Family | None:
    """The family a tokenizer was installed with, else the one its template's fingerprint names (the training
    variants carry their family's fingerprint too)."""
    name = getattr(tokenizer, "studio_chat_family", None)
    if name in FAMILIES:
        return FAMILIES[name]
    template = getattr(tokenizer, "chat_template", None)
    return family_of(template) if isinstance(template, str) and template else None


def _short_id(value: str) -> str:
    """A 9-character alphanumeric id (Mistral's templates refuse others), stable for the same original id."""
    if len(value) == 9 and value.isalnum():
        return value
    return hashlib.sha256(value.encode()).hexdigest()[:9]


def prepare_messages(family: Family, messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """OpenAI-style messages shaped for a family's template, as vLLM shapes them: tool-call arguments as
    objects, no empty `tool_calls`, no null content; per family, what its template cannot take itself."""
    shaped: list[dict] = []
    for message in messages:
        out = {k: v for k, v in message.items() if k != "tool_calls"}
        if out.get("content") is None:
            out["content"] = ""
        calls = [_call_with_object_arguments(c) for c in message.get("tool_calls") or []]
        if family.tool_format == "mistral":
            calls = [{**c, "id": _short_id(str(c.get("id", "")))} for c in calls]
            if message.get("role") == "tool":
                out["tool_call_id"] = _short_id(str(message.get("tool_call_id", "")))
        if family.name == "gemma3" and calls:  # Gemma's template knows no calls: they are the model's text
            out["content"] = tool_calls.render("pythonic", [c["function"] for c in calls])
        if family.name == "gemma3" and out.get("role") == "tool":  # nor tool turns: results come as the user's
            out = {"role": "user", "content": out["content"]}
        elif calls:
            out["tool_calls"] = calls
        shaped.append(out)
    if family.name == "gemma3" and tools:
        shaped = _gemma_tools_in_system(shaped, tools)
    return shaped


def _call_with_object_arguments(call: dict) -> dict:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise TrainingError(f"tool call {function.get('name')!r} has arguments that are not JSON: "
                                f"{arguments[:200]!r}") from None
    return {**call, "function": {"name": function.get("name"), "arguments": function.get("arguments", {})}}


GEMMA_TOOLS = ("You can call these functions. To call one or more, answer with only a Python list of calls, "
               "e.g. [name(arg=value)].\n")


def _gemma_tools_in_system(messages: list[dict], tools: list[dict]) -> list[dict]:
    declared = GEMMA_TOOLS + json.dumps([t.get("function", t) for t in tools], indent=4)
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{declared}"}, *messages[1:]]
    return [{"role": "system", "content": declared}, *messages]

# training/config checks `chat.family` against its own list (so that it imports no room of the engine): the two agree
assert tuple(FAMILIES) == CHAT_FAMILIES, f"training/config lists {CHAT_FAMILIES}, chat_templates {tuple(FAMILIES)}"
