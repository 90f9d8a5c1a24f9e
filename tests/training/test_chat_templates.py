"""Chat models beyond ChatML: tiny offline tokenizers with templates written in the style of each family."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from training.model.chat_format import encode_conversation, end_of_turn_ids, pad_token_id, render
from training.types import TrainingError

# Each style: (special tokens, eos, pad, chat template, generation-config eos ids by token, end-of-turn token).
CHATML = (
    ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|im_end|>", "<|endoftext|>",
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    ["<|im_end|>", "<|endoftext|>"], "<|im_end|>",
)
LLAMA3 = (
    ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "<|end_of_text|>", None,
    "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    ["<|end_of_text|>", "<|eot_id|>"], "<|eot_id|>",
)
MISTRAL = (
    ["<s>", "</s>", "[INST]", "[/INST]"], "</s>", None,
    "<s>{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]"
    "{% elif m.role == 'assistant' %}{{ m.content }}</s>{% endif %}{% endfor %}",
    [], "</s>",
)
GEMMA = (
    ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"], "<eos>", "<pad>",
    "<bos>{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
    "{{ m.content }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
    ["<eos>", "<end_of_turn>"], "<end_of_turn>",
)
STYLES = {"chatml": CHATML, "llama3": LLAMA3, "mistral": MISTRAL, "gemma": GEMMA}

CONVERSATION = [
    {"role": "user", "content": "Board: 2 . . 4"},
    {"role": "assistant", "content": "<move>left</move>"},
    {"role": "user", "content": "Board: 2 4 . ."},
    {"role": "assistant", "content": "<move>up</move>"},
]


def build(style: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials, eos, pad, template, generation_eos, _ = STYLES[style]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(["Board: 2 4 . . <move>left</move> <move>up</move> user assistant"] * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=eos, pad_token=pad)
    tokenizer.chat_template = template
    generation = SimpleNamespace(eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in generation_eos] or None)
    return tokenizer, generation


@pytest.mark.parametrize("style", sorted(STYLES))
def test_the_mask_covers_exactly_the_assistant_bodies_and_their_end_of_turn(style):
    tokenizer, generation = build(style)
    end = STYLES[style][5]
    ids, mask = encode_conversation(tokenizer, CONVERSATION, end_ids=end_of_turn_ids(tokenizer, generation))
    trained = [i for i, m in zip(ids, mask) if m]
    expected = tokenizer(f"<move>left</move>{end}<move>up</move>{end}", add_special_tokens=False)["input_ids"]
    assert trained == expected


@pytest.mark.parametrize("style", sorted(STYLES))
def test_multi_turn_encoding_is_the_rendered_conversation(style):
    tokenizer, generation = build(style)
    ids, _ = encode_conversation(tokenizer, CONVERSATION, end_ids=end_of_turn_ids(tokenizer, generation))
    whole = tokenizer(render(tokenizer, CONVERSATION, None, generation_prompt=False), add_special_tokens=False)
    assert ids == whole["input_ids"]  # prefix-stable: the turns concatenate to the whole


def test_a_truncated_sampled_turn_gets_the_templates_own_end_marker_untrained():
    tokenizer, generation = build("llama3")
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    sampled = tokenizer("<move>le", add_special_tokens=False)["input_ids"]  # cut off at max_tokens
    ids, mask = encode_conversation(tokenizer, CONVERSATION[:2], None, [sampled],
                                    end_ids=end_of_turn_ids(tokenizer, generation))
    assert ids[-1] == eot and mask[-1] == 0  # Llama's own marker, never ChatML's unknown <|im_end|>
    assert tokenizer.unk_token_id is None or tokenizer.unk_token_id not in ids
    assert [i for i, m in zip(ids, mask) if m] == sampled


def test_a_tokenizer_without_a_pad_token_pads_with_eos():
    torch = pytest.importorskip("torch", reason="pad_batch builds torch tensors")  # `make check-py312` has no torch
    from training.sft.whole_model import pad_batch

    tokenizer, _ = build("mistral")
    assert tokenizer.pad_token_id is None
    pad = pad_token_id(tokenizer)
    assert pad == tokenizer.eos_token_id
    input_ids, loss_mask, attention = pad_batch([([5, 6, 7], [0, 1, 1]), ([5], [0])], pad)
    assert input_ids[1].tolist() == [5, pad, pad] and attention[1].tolist() == [1, 0, 0]
    assert torch.equal(loss_mask[1], torch.zeros(3))


def test_an_unknown_template_that_drops_past_reasoning_is_refused_with_the_reason():
    tokenizer, generation = build("chatml")
    # Qwen3-style but not Qwen3's (whose training variant keeps past turns, tests/training/test_chat_families.py):
    # an earlier assistant turn loses its <think> block once a later user turn follows.
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1] }}"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    conversation = [CONVERSATION[0], {"role": "assistant", "content": "<think>hm</think><move>left</move>"},
                    *CONVERSATION[2:]]
    with pytest.raises(TrainingError, match="not prefix-stable.*renders past turns verbatim"):
        encode_conversation(tokenizer, conversation, end_ids=end_of_turn_ids(tokenizer, generation))
