"""Turning conversations into token ids with a mask over the agent's own tokens.

A conversation is rendered with the model's chat template message by message: the text a message adds is the
difference between rendering the conversation up to and including it and rendering what came before. Only the
body of assistant messages (content, tool calls and the end-of-turn marker) is trained; system, user and tool
messages, and the assistant header, are context. Where the server returned the exact ids it sampled for an
assistant turn, those ids replace the re-tokenised body, so training sees exactly what was sampled.

The end of an assistant turn is any of the model's end-of-turn ids: the tokenizer's EOS and those of the
model's generation config (ChatML `<|im_end|>`, Llama 3 `<|eot_id|>`, Gemma `<end_of_turn>`, Mistral `</s>`),
never a hard-coded string. A tokenizer whose template is a known family's (training.model.chat_templates: Qwen3,
Qwen2.5, Llama 3.x, Gemma 3, Mistral) is rendered with that family's prefix-stable training template and its
messages shaped as the family expects, so Qwen3's thinking template trains with past reasoning kept. Any other
template that rewrites earlier turns is refused with a clear error: give such a model a template that keeps
past turns verbatim (its catalogue entry's chat_template).
"""
from __future__ import annotations

import json
import threading
import weakref
from typing import Any

from training.model.chat_templates import installed_family, prepare_messages, training_template
from training.types import TrainingError

# Our own ChatML-style template (the tiny model uses it; hub models bring theirs). Written without
# incidental whitespace, so no Jinja trimming is needed. Each message renders as
# "<|im_start|>ROLE\nBODY<|im_end|>\n"; tools are declared once in the system turn; tool calls are
# <tool_call>{json}</tool_call> blocks inside the assistant body.
CHAT_TEMPLATE = (
    "{% if tools or messages[0].role == 'system' %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}\n\n# Tools\nCall a tool with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.\n"
    "<tools>\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if not (loop.first and message.role == 'system') %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for call in message.tool_calls or [] %}"
    "<tool_call>{\"name\": {{ call.function.name | tojson }}, \"arguments\": {{ call.function.arguments }}}</tool_call>"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

END_OF_TURN = "<|im_end|>"  # the end-of-turn marker of our own template (the tiny model's EOS)
NOT_PREFIX_STABLE = (
    "the chat template is not prefix-stable: rendering a conversation rewrites its earlier turns (a template "
    "that drops the reasoning of past assistant turns, say), so assistant turns cannot be masked; use a chat "
    "template that renders past turns verbatim, or one of the known families' (docs/engine.md, chat families)"
)


def end_of_turn_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """The ids that end an assistant turn: the generation config's EOS ids, then the tokenizer's EOS."""
    ids: list[int] = []
    configured = getattr(generation_config, "eos_token_id", None)
    for value in (configured if isinstance(configured, (list, tuple)) else [configured]) + [tokenizer.eos_token_id]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    if not ids:
        raise TrainingError("the tokenizer has no EOS token and the model no generation config naming one: "
                            "cannot tell where an assistant turn ends")
    return ids


def pad_token_id(tokenizer: Any) -> int:
    """The pad id; EOS where the tokenizer has no pad token (Llama, Mistral). Padding is masked out anyway."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    if tokenizer.eos_token_id is not None:
        return int(tokenizer.eos_token_id)
    raise TrainingError("the tokenizer has neither a pad nor an EOS token to pad batches with")


# Per tokenizer, the latest renderings and tokenisations: a group's N trajectories share their prompt, which is
# then rendered and tokenised once instead of N times. Small, first in first out (a group's trajectories are
# encoded one after another), and keyed by the template too, so a changed chat_template is never served stale.
_MEMO: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_MEMO_SIZE = 256
_MEMO_LOCK = threading.Lock()


def _memoised(tokenizer: Any, key: tuple, make: Any) -> Any:
    key = (getattr(tokenizer, "chat_template", None),) + key
    with _MEMO_LOCK:
        try:
            memo = _MEMO.setdefault(tokenizer, {})
        except TypeError:  # a tokenizer object that cannot be weakly referenced or hashed: no memo for it
            memo = None
        if memo is not None and key in memo:
            return memo[key]
    value = make()
    if memo is None:
        return value
    with _MEMO_LOCK:
        if len(memo) >= _MEMO_SIZE:
            memo.pop(next(iter(memo)))
        memo[key] = value
    return value


def render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, *, generation_prompt: bool) -> str:
    key = ("render", json.dumps([messages, tools or None], sort_keys=True, default=str), generation_prompt)
    return _memoised(tokenizer, key, lambda: _render(tokenizer, messages, tools, generation_prompt))


def _render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, generation_prompt: bool) -> str:
    family = installed_family(tokenizer)
    template = None  # the tokenizer's own
    if family is not None:
        messages = prepare_messages(family, messages, tools)
        if getattr(tokenizer, "studio_chat_family", None) is None:  # not installed: the published template
            template = training_template(family)
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                         add_generation_prompt=generation_prompt, chat_template=template)


def prompt_ids(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    """The ids of the prompt the next assistant turn is sampled from: the conversation rendered with the generation
    prompt (shaped and templated as the tokenizer's family wants), tokenised without special tokens. The local
    server samples after exactly these ids, the trainer trains the turn after them and the prompt budget counts
    them: one rendering, so the three never differ by a token."""
    return _ids(tokenizer, render(tokenizer, messages, tools, generation_prompt=True))


def conversation_tokens(tokenizer: Any, messages: list[dict], tools: list[dict] | None = None) -> int:
    """The tokens of a whole conversation as the chat template renders it: what an SFT run trains on, to the few
    tokens of its turn ends. One render and one tokenisation (no memo), cheap enough for every row of an upload."""
    text = _render(tokenizer, messages, tools, False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0


def _ids(tokenizer: Any, text: str) -> list[int]:
    if not text:
        return []
    return list(_memoised(tokenizer, ("ids", text),
                          lambda: tuple(tokenizer(text, add_special_tokens=False)["input_ids"])))


def encode_conversation(
    tokenizer: Any,
    messages: list[dict],
    tools: list[dict] | None = None,
    turn_token_ids: list[list[int] | None] | None = None,
    *,
    end_ids: list[int] | None = None,
) -> tuple[list[int], list[int]]:
    """Returns (input_ids, mask) where mask[i] = 1 for tokens of the agent's own turns."""
    ids, mask, _ = encode_with_logprobs(tokenizer, messages, tools, turn_token_ids, end_ids=end_ids)
    return ids, mask


def encode_with_logprobs(
    tokenizer: Any,
    messages: list[dict],
    tools: list[dict] | None = None,
    turn_token_ids: list[list[int] | None] | None = None,
    turn_logprobs: list[list[float] | None] | None = None,
    *,
    end_ids: list[int] | None = None,
) -> tuple[list[int], list[int], list[float]]:
    """(input_ids, mask, sampler log-probs); the log-prob is NaN where the server did not report one."""
    end_ids = end_ids or end_of_turn_ids(tokenizer)
    input_ids: list[int] = []
    mask: list[int] = []
    sampler: list[float] = []
    nan = float("nan")
    rendered = ""
    assistant_turn = 0
    for k, message in enumerate(messages):
        if message["role"] != "assistant" and k + 1 < len(messages) and messages[k + 1]["role"] != "assistant":
            # Context turns in a row are rendered once, together: some templates cannot render a conversation
            # cut between them (Llama 3 with tools needs the first user message beside the system prompt).
            continue
        if message["role"] == "assistant":
            header_end = render(tokenizer, messages[:k], tools, generation_prompt=True) if k else ""
            if not header_end.startswith(rendered):
                raise TrainingError(NOT_PREFIX_STABLE)
            header, rendered = header_end[len(rendered):], header_end
        else:
            header = ""
        full = render(tokenizer, messages[: k + 1], tools, generation_prompt=False)
        if not full.startswith(rendered):
            raise TrainingError(NOT_PREFIX_STABLE)
        added, rendered = full[len(rendered):], full
        added_ids = _ids(tokenizer, added)
        if message["role"] != "assistant":
            input_ids += added_ids
            mask += [0] * len(added_ids)
            sampler += [nan] * len(added_ids)
            continue
        header_ids = _ids(tokenizer, header)
        input_ids += header_ids
        mask += [0] * len(header_ids)
        sampler += [nan] * len(header_ids)
        # The body ends at the first end-of-turn id; what follows it (a newline, say) is context.
        cut = next((i for i, t in enumerate(added_ids) if t in end_ids), None)
        body, tail = (added_ids, []) if cut is None else (added_ids[: cut + 1], added_ids[cut + 1:])
        turn = assistant_turn
        sampled = turn_token_ids[turn] if turn_token_ids and turn < len(turn_token_ids) else None
        lps = turn_logprobs[turn] if turn_logprobs and turn < len(turn_logprobs) else None
        assistant_turn += 1
        if sampled:
            input_ids += sampled
            mask += [1] * len(sampled)
            sampler += list(lps) if lps and len(lps) == len(sampled) else [nan] * len(sampled)
            if sampled[-1] not in end_ids and cut is not None:
                # Truncated at max_tokens: the template's marker was not sampled, so it is context, not trained.
                input_ids.append(body[-1])
                mask.append(0)
                sampler.append(nan)
        else:
            input_ids += body
            mask += [1] * len(body)
            sampler += [nan] * len(body)
        input_ids += tail
        mask += [0] * len(tail)
        sampler += [nan] * len(tail)
    return input_ids, mask, sampler
