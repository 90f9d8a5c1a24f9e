"""Turning conversations into token ids with a mask over the agent's own tokens.

A conversation is rendered with the model's chat template message by message: the text a message adds is the
difference between rendering the conversation up to and including it and rendering what came before. Only the
body of assistant messages (content, tool calls and the end-of-turn marker) is trained; system, user and tool
messages, and the assistant header, are context. Where the server returned the exact ids it sampled for an
assistant turn, those ids replace the re-tokenised body, so training sees exactly what was sampled.
"""
from __future__ import annotations

from typing import Any

from training.errors import TrainingError

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

END_OF_TURN = "<|im_end|>"


def render(tokenizer: Any, messages: list[dict], tools: list[dict] | None, *, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=generation_prompt
    )


def _ids(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def encode_conversation(
    tokenizer: Any,
    messages: list[dict],
    tools: list[dict] | None = None,
    turn_token_ids: list[list[int] | None] | None = None,
) -> tuple[list[int], list[int]]:
    """Returns (input_ids, mask) where mask[i] = 1 for tokens of the agent's own turns."""
    input_ids: list[int] = []
    mask: list[int] = []
    rendered = ""
    assistant_turn = 0
    for k, message in enumerate(messages):
        if message["role"] == "assistant":
            header_end = render(tokenizer, messages[:k], tools, generation_prompt=True) if k else ""
            if not header_end.startswith(rendered):
                raise TrainingError("the chat template is not prefix-stable; cannot mask assistant turns")
            header, rendered = header_end[len(rendered):], header_end
        else:
            header = ""
        full = render(tokenizer, messages[: k + 1], tools, generation_prompt=False)
        if not full.startswith(rendered):
            raise TrainingError("the chat template is not prefix-stable; cannot mask assistant turns")
        added, rendered = full[len(rendered):], full
        if message["role"] != "assistant":
            ids = _ids(tokenizer, added)
            input_ids += ids
            mask += [0] * len(ids)
            continue
        header_ids = _ids(tokenizer, header)
        input_ids += header_ids
        mask += [0] * len(header_ids)
        # The body ends at the end-of-turn marker; what follows it (a newline) is context.
        cut = added.find(END_OF_TURN)
        body, tail = (added, "") if cut < 0 else (added[: cut + len(END_OF_TURN)], added[cut + len(END_OF_TURN):])
        sampled = turn_token_ids[assistant_turn] if turn_token_ids and assistant_turn < len(turn_token_ids) else None
        assistant_turn += 1
        if sampled:
            end_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
            input_ids += sampled
            mask += [1] * len(sampled)
            if sampled[-1] != end_id:  # truncated at max_tokens: the marker was not sampled, so not trained
                input_ids.append(end_id)
                mask.append(0)
        else:
            body_ids = _ids(tokenizer, body)
            input_ids += body_ids
            mask += [1] * len(body_ids)
        tail_ids = _ids(tokenizer, tail)
        input_ids += tail_ids
        mask += [0] * len(tail_ids)
    return input_ids, mask
