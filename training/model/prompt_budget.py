"""Does a run's prompt leave room for its answers? The opening prompt (system prompt, the tools as the model's
chat template renders them, the longest scenario) plus `sampling.max_tokens` must fit the model's context, or
every rollout of that scenario fails at the server ("max_tokens is more than the tokens left") and the run dies
at step 1. Counted as the inference servers count it, with the trainer's own rendering
(training.model.chat_format.prompt_ids): the run's chat family and reasoning setting applied (training.model.chat_templates),
the generation prompt included, tokenised without special tokens.

Pure: a tokenizer, the model's context and the numbers in, a `PromptBudget` out; the launch check (preflight),
the web app's agent form and the command line all read the same one.

    budget = prompt_budget(tokenizer, context=1024, system_prompt="…", tools=[…], scenarios=[…], max_tokens=256)
    budget.problem()  # None, or one sentence saying what does not fit and what to change
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from training.environments.base import opening_messages
from training.model.chat_format import prompt_ids
from training.model.chat_templates import install
from training.types import Scenario

if TYPE_CHECKING:
    from training.config import ChatConfig

# Scenarios whose text alone is longest are rendered in full (the template adds the same frame to each, so the
# longest text is the longest prompt up to a few tokens; the few next ones cover the difference).
RENDERED = 3


@dataclass(frozen=True)
class PromptBudget:
    context: int  # tokens the model holds, prompt and answer together
    frame: int  # the system prompt and the tools, rendered with an empty question
    prompt: int  # the whole opening prompt of the longest scenario ( = frame with no scenarios)
    max_tokens: int  # what each answer may take
    scenario: str | None = None  # the longest scenario's id
    tools: int = 0  # how many tools were rendered

    @property
    def needed(self) -> int:
        return self.prompt + self.max_tokens

    @property
    def room(self) -> int:
        """Tokens left for a scenario's text once the system prompt, tools and the answer are counted."""
        return self.context - self.frame - self.max_tokens

    def problem(self) -> str | None:
        """One sentence for people when the prompt and its answer do not fit, naming the numbers; else None."""
        if self.needed <= self.context:
            return None
        parts = ["the system prompt"] + ([f"its {self.tools} tools"] if self.tools else []) + \
            ([f"the longest scenario, {self.scenario}"] if self.scenario else [])
        what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        fix = "shorten the system prompt" + (", use fewer tools" if self.tools else "") + \
              (" or the longest scenarios" if self.scenario else "")
        if self.prompt >= self.context:
            return (f"the prompt does not fit the model: it is {self.prompt} tokens ({what}), more than the model's "
                    f"context of {self.context} tokens before any answer; {fix}")
        return (f"the prompt does not fit the model: it is {self.prompt} tokens ({what}), plus max tokens "
                f"{self.max_tokens} = {self.needed}, more than the model's context of {self.context} tokens; "
                f"{fix}, or lower the agent's max tokens to at most {self.context - self.prompt}")


def _tokens(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    return len(prompt_ids(tokenizer, messages, tools))


def _as_the_run_renders(tokenizer: Any, chat: ChatConfig | None) -> Any:
    """`tokenizer` with the run's chat family installed as the trainer and the server install it (Qwen3 without
    reasoning samples after an empty think block, say); a shallow copy, so the caller's tokenizer is unchanged."""
    counted = copy.copy(tokenizer)
    install(counted, name=chat.family if chat else None, reasoning=chat.reasoning if chat else "keep")
    return counted


def prompt_budget(tokenizer: Any, *, context: int, system_prompt: str, tools: list[dict[str, Any]] | None,
                  scenarios: Sequence[Scenario], max_tokens: int, chat: ChatConfig | None = None) -> PromptBudget:
    """The budget of the opening prompt of the longest of `scenarios` (none: the system prompt and tools alone).
    `chat`: the run's chat family and reasoning setting (default: the family the template's fingerprint names)."""
    tokenizer = _as_the_run_renders(tokenizer, chat)
    frame = _tokens(tokenizer, opening_messages(Scenario(id="", user_message=""), system_prompt), tools)
    prompt, longest = frame, None
    if scenarios:
        texts = [s.user_message if not s.context else f"{s.user_message}\n\nContext:\n{s.context}" for s in scenarios]
        lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        for i in sorted(range(len(scenarios)), key=lambda i: -lengths[i])[:RENDERED]:
            n = _tokens(tokenizer, opening_messages(scenarios[i], system_prompt), tools)
            if longest is None or n > prompt:
                prompt, longest = n, scenarios[i].id
    return PromptBudget(context=context, frame=frame, prompt=prompt, max_tokens=max_tokens, scenario=longest,
                        tools=len(tools or []))


def model_context(model_config: Any) -> int | None:
    """The context a model holds, from its config (a multimodal model's text part when it has one)."""
    text = getattr(model_config, "text_config", None) or model_config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def environment_tools(kind: str, options: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tools an environment gives the model, as far as its options say without running anything: the `tools`
    environment's registered and custom tools (their declared schemas; nothing is imported). An `mcp`
    environment's tools are the server's, listed by whoever has them (the web app keeps the last listing)."""
    if kind != "tools":
        return None
    from training.environments.tools import _TOOLS, ToolsOptions

    parsed = ToolsOptions.model_validate(options or {})
    schemas = [_TOOLS[name].schema() for name in parsed.tools if name in _TOOLS]
    schemas += [{"type": "function", "function": {"name": s.name, "description": s.description,
                                                  "parameters": s.parameters}} for s in parsed.custom_tools]
    return schemas
