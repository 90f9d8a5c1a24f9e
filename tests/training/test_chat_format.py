from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from training.model.chat_format import encode_conversation, render


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def trained_text(tokenizer, ids, mask):
    return tokenizer.decode([i for i, m in zip(ids, mask) if m])


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Board:\n2 . . ."},
    {"role": "assistant", "content": "<move>left</move>"},
    {"role": "user", "content": "Board:\n. . . 2"},
    {"role": "assistant", "content": "<move>up</move>"},
]


def test_only_the_assistant_turns_and_their_end_markers_are_trained(tokenizer):
    ids, mask = encode_conversation(tokenizer, CONVERSATION)
    assert trained_text(tokenizer, ids, mask) == "<move>left</move><|im_end|><move>up</move><|im_end|>"


def test_the_encoding_equals_tokenising_the_rendered_conversation(tokenizer):
    ids, _ = encode_conversation(tokenizer, CONVERSATION)
    whole = tokenizer(render(tokenizer, CONVERSATION, None, generation_prompt=False), add_special_tokens=False)
    assert ids == whole["input_ids"]


def test_sampled_token_ids_replace_the_retokenised_turn(tokenizer):
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampled = tokenizer("<move>", add_special_tokens=False)["input_ids"] + tokenizer("left</move>", add_special_tokens=False)["input_ids"] + [end]
    ids, mask = encode_conversation(tokenizer, CONVERSATION[:3], turn_token_ids=[sampled])
    assert [i for i, m in zip(ids, mask) if m] == sampled


def test_a_turn_cut_by_max_tokens_does_not_train_the_end_marker_it_never_sampled(tokenizer):
    sampled = tokenizer("<move>le", add_special_tokens=False)["input_ids"]
    convo = CONVERSATION[:2] + [{"role": "assistant", "content": "<move>le"}]
    ids, mask = encode_conversation(tokenizer, convo, turn_token_ids=[sampled])
    assert [i for i, m in zip(ids, mask) if m] == sampled
    end_at = len(ids) - 1 - ids[::-1].index(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    assert end_at > max(i for i, m in enumerate(mask) if m) and mask[end_at] == 0


def test_tool_calls_are_trained_and_tool_results_are_context(tokenizer):
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
    convo = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+2"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        {"role": "assistant", "content": "It is 4."},
    ]
    ids, mask = encode_conversation(tokenizer, convo, tools)
    trained = trained_text(tokenizer, ids, mask)
    assert '<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>' in trained
    assert trained.endswith("It is 4.<|im_end|>")
    assert "calculator" in tokenizer.decode(ids[: ids.index(tokenizer.convert_tokens_to_ids("<|im_start|>"), 1)])
    assert "4<|im_end|>\n<|im_start|>assistant" not in trained


def test_a_changed_chat_template_is_rendered_anew_not_served_from_the_memo(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)  # its own: the template is changed below
    messages = [{"role": "user", "content": "hi"}]
    first = render(tokenizer, messages, None, generation_prompt=False)
    assert render(tokenizer, messages, None, generation_prompt=False) == first
    tokenizer.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    assert render(tokenizer, messages, None, generation_prompt=False) == "[user] hi\n"
    # An edited message is a new key, whatever was rendered before.
    assert render(tokenizer, [{"role": "user", "content": "ho"}], None, generation_prompt=False) == "[user] ho\n"


@pytest.mark.parametrize("variant", ["2048", "mailbox"])
def test_a_tiny_tokenizer_loads_back_as_it_was_trained(tmp_path, variant):
    # A server loads a Qwen2 model's tokenizer with Qwen2's own pre-tokenisation (transformers 5 rebuilds it,
    # whatever tokenizer.json says): the tiny models' SFT must have used the same split, digits and all.
    from transformers import Qwen2Config

    from training.fixtures import tiny_mailbox_model
    from training.fixtures import tiny_model

    text = ('{"id": "m0051", "date": "2024-02-28", "subject": "Iris budget approved"} room B41, TP123, '
            '45,000 euros; Board:\n2048 128 . 4 Ünïcode')
    build = tiny_model.build_tokenizer if variant == "2048" else tiny_mailbox_model.build_tokenizer
    trained = build([text] * 20 + ["2024-03-01 m0007 512 1024 and some words"] * 20)
    trained.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(trained)).save_pretrained(tmp_path)
    served = AutoTokenizer.from_pretrained(tmp_path)
    assert served(text)["input_ids"] == trained(text)["input_ids"]
    assert trained.tokenize("2024") == ["2", "0", "2", "4"]  # digits one by one, as Qwen2 splits them
    if variant == "mailbox":
        # an email id is "m" and its digits: copying an id is copying digits, the same skill for every email
        assert trained.tokenize("m0051") == ["m", "0", "0", "5", "1"]
        assert served.decode(served("m0051")["input_ids"]) == "m0051"
