"""Assistant-only masks for SFT conversations with tool calls, in the chat-template styles of four families.

Tiny offline tokenizers (as tests/training/test_chat_templates.py builds them) with templates written in the
style of ChatML (Qwen/Hermes tool calls), Llama 3.1 (JSON tool calls, `ipython` results), Mistral (`[TOOL_CALLS]`
and `[TOOL_RESULTS]`) and Gemma (tool code blocks in the model's turn). A dataset conversation goes through the
same renderer GRPO uses; the trained tokens must be exactly the assistant turns (their tool calls included) and
their end-of-turn marker, never the system prompt, the tool list, the user's turns or the tool results.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from training.model.chat_format import encode_conversation, end_of_turn_ids, render
from training.sft.data import Conversation
from training.types import TrainingError

CHATML = dict(
    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|im_end|>", pad="<|endoftext|>",
    generation_eos=["<|im_end|>", "<|endoftext|>"],
    template=(
        "{% if tools %}<|im_start|>system\n{{ messages[0].content if messages[0].role == 'system' else '' }}"
        "<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools><|im_end|>\n"
        "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
        "{% for m in messages %}{% if m.role == 'system' %}"
        "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}</tool_response><|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
        "{% for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
        "{{ c.function.arguments }}}</tool_call>{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    answers=["<tool_call>{\"name\": \"lookup\", \"arguments\": {\"q\": \"fjord\"}}</tool_call><|im_end|>",
             "A long narrow inlet.<|im_end|>"],
)
LLAMA3 = dict(
    specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    eos="<|end_of_text|>", pad=None, generation_eos=["<|end_of_text|>", "<|eot_id|>"],
    template=(
        "<|begin_of_text|>{% for m in messages %}"
        "<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n\n"
        "{% if m.role == 'system' and tools %}{{ m.content }}\nTools: {% for t in tools %}{{ t.function.name }} "
        "{% endfor %}{% elif m.tool_calls %}{% for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", "
        "\"parameters\": {{ c.function.arguments }}}{% endfor %}{% else %}{{ m.content }}{% endif %}<|eot_id|>"
        "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"),
    answers=["{\"name\": \"lookup\", \"parameters\": {\"q\": \"fjord\"}}<|eot_id|>", "A long narrow inlet.<|eot_id|>"],
)
MISTRAL = dict(
    specials=["<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]",
              "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
    eos="</s>", pad=None, generation_eos=[],
    # Tools declared once at the start: Mistral's own templates put them before the LAST user turn, which
    # rewrites earlier text as the conversation grows (see the last test).
    template=(
        "<s>{% if tools %}[AVAILABLE_TOOLS]{% for t in tools %}{{ t.function.name }};{% endfor %}[/AVAILABLE_TOOLS]"
        "{% endif %}{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}\n"
        "{% elif m.role == 'user' %}[INST] {{ m.content }} [/INST]"
        "{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]"
        "{% elif m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}{\"name\": \"{{ c.function.name }}\", "
        "\"arguments\": {{ c.function.arguments }}}{% endfor %}]</s>"
        "{% else %}{{ m.content }}</s>{% endif %}{% endfor %}"),
    answers=["[TOOL_CALLS][{\"name\": \"lookup\", \"arguments\": {\"q\": \"fjord\"}}]</s>", "A long narrow inlet.</s>"],
)
GEMMA = dict(
    specials=["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"], eos="<eos>", pad="<pad>",
    generation_eos=["<eos>", "<end_of_turn>"],
    template=(
        "<bos>{% for m in messages %}{% if m.role == 'system' %}<start_of_turn>user\n{{ m.content }}"
        "{% if tools %}\nTools: {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}<end_of_turn>\n"
        "{% elif m.role == 'tool' %}<start_of_turn>user\n```tool_output\n{{ m.content }}\n```<end_of_turn>\n"
        "{% else %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}\n{{ m.content or '' }}"
        "{% for c in m.tool_calls or [] %}```tool_code\n{{ c.function.name }}({{ c.function.arguments }})\n```"
        "{% endfor %}<end_of_turn>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"),
    answers=["```tool_code\nlookup({\"q\": \"fjord\"})\n```<end_of_turn>", "A long narrow inlet.<end_of_turn>"],
)
STYLES = {"chatml": CHATML, "llama3": LLAMA3, "mistral": MISTRAL, "gemma": GEMMA}

ROW = {
    "messages": [
        {"role": "system", "content": "Look words up before answering."},
        {"role": "user", "content": "What is a fjord?"},
        {"role": "assistant", "tool_calls": [{"id": "c0", "type": "function",
                                              "function": {"name": "lookup", "arguments": "{\"q\": \"fjord\"}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "fjord: a long narrow inlet of the sea"},
        {"role": "assistant", "content": "A long narrow inlet."},
    ],
    "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
                                                "parameters": {"type": "object"}}}],
}


def build(style: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = STYLES[style]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=spec["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(["What is a fjord? A long narrow inlet. lookup arguments name tool_code"] * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=spec["eos"], pad_token=spec["pad"])
    tokenizer.chat_template = spec["template"]
    generation = SimpleNamespace(eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in spec["generation_eos"]]
                                 or None)
    return tokenizer, end_of_turn_ids(tokenizer, generation)


def trained_spans(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    """The text of each run of trained tokens, in order."""
    spans, current = [], []
    for token, trained in zip(ids, mask):
        if trained:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return [tokenizer.decode(s, skip_special_tokens=False) for s in spans]


@pytest.mark.parametrize("style", sorted(STYLES))
def test_only_the_assistant_turns_with_their_tool_calls_and_end_markers_are_trained(style):
    tokenizer, end_ids = build(style)
    conversation = Conversation.model_validate(ROW)
    ids, mask = encode_conversation(tokenizer, conversation.as_messages(), conversation.tool_list(), end_ids=end_ids)
    assert trained_spans(tokenizer, ids, mask) == STYLES[style]["answers"]
    # Nothing of the context is trained: the tool result and the user's question appear only untrained.
    untrained = tokenizer.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=False)
    assert "a long narrow inlet of the sea" in untrained and "What is a fjord?" in untrained


@pytest.mark.parametrize("style", sorted(STYLES))
def test_the_ids_are_the_rendered_conversation_with_its_tools(style):
    tokenizer, end_ids = build(style)
    conversation = Conversation.model_validate(ROW)
    ids, _ = encode_conversation(tokenizer, conversation.as_messages(), conversation.tool_list(), end_ids=end_ids)
    whole = render(tokenizer, conversation.as_messages(), conversation.tool_list(), generation_prompt=False)
    assert tokenizer.decode(ids, skip_special_tokens=False) == whole
    assert "lookup" in whole.split("What is a fjord?")[0]  # the tool list is declared before the question


def test_a_template_that_moves_the_tool_list_to_the_last_user_turn_is_refused():
    # Mistral's own templates declare the tools just before the last [INST]: each new user turn moves them,
    # so the text of earlier turns changes and no assistant turn can be masked in place.
    tokenizer, end_ids = build("mistral")
    tokenizer.chat_template = (
        "<s>{% set last = namespace(i=0) %}{% for m in messages %}{% if m.role == 'user' %}"
        "{% set last.i = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}{% if m.role == 'user' %}"
        "{% if tools and loop.index0 == last.i %}[AVAILABLE_TOOLS]lookup;[/AVAILABLE_TOOLS]{% endif %}"
        "[INST] {{ m.content }} [/INST]{% elif m.role == 'assistant' %}{{ m.content }}</s>{% endif %}{% endfor %}")
    rows = {"messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "1"},
                         {"role": "user", "content": "two"}, {"role": "assistant", "content": "2"}],
            "tools": ROW["tools"]}
    conversation = Conversation.model_validate(rows)
    with pytest.raises(TrainingError, match="not prefix-stable"):
        encode_conversation(tokenizer, conversation.as_messages(), conversation.tool_list(), end_ids=end_ids)
