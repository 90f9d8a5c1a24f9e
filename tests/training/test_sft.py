"""SFT on conversations: batches that mix prompts with and without the tool list, and an optimiser carried over."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from training.fixtures.tiny_model import MODEL_SHAPE, build_tokenizer  # noqa: E402
from training.sft.whole_model import SFTConfig, sft_train  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Look a word up.",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
CONVERSATION = [
    {"role": "system", "content": "Look it up."},
    {"role": "user", "content": "What is a fjord?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": "fjord"})}}]},
    {"role": "tool", "tool_call_id": "c0", "content": "a long narrow inlet"},
    {"role": "assistant", "content": "A long narrow inlet."},
]


def model_and_tokenizer():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer([json.dumps(CONVERSATION), json.dumps(TOOLS)])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None,
                                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                                         **MODEL_SHAPE))
    return model, tokenizer


def test_half_of_a_batch_sees_the_tool_list_and_the_loss_covers_both_halves():
    # The same conversation four times, half the batch with the tool list in the prompt: the prompt is not
    # trained, each row has the same assistant tokens, so the mixed loss is the mean of the two pure ones.
    losses = {}
    for share in (0.0, 0.5, 1.0):
        model, tokenizer = model_and_tokenizer()
        config = SFTConfig(steps=1, batch_size=4, learning_rate=1e-3, tools_share=share)
        losses[share] = sft_train(model, tokenizer, [CONVERSATION] * 4, config, tools=TOOLS)[0]
    assert losses[0.0] != pytest.approx(losses[1.0], abs=1e-4)  # the tool list does change what is predicted
    assert losses[0.5] == pytest.approx((losses[0.0] + losses[1.0]) / 2, rel=1e-5)


def test_an_optimiser_passed_on_keeps_its_state_and_takes_the_new_learning_rate():
    model, tokenizer = model_and_tokenizer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sft_train(model, tokenizer, [CONVERSATION] * 4, SFTConfig(steps=3, batch_size=2, tools_share=0.0),
              tools=TOOLS, optimizer=optimizer)
    sft_train(model, tokenizer, [CONVERSATION] * 4, SFTConfig(steps=2, batch_size=2, learning_rate=1e-3,
                                                              tools_share=0.5), tools=TOOLS, optimizer=optimizer)
    steps = {float(state["step"]) for state in optimizer.state.values()}
    assert steps == {5.0} and optimizer.param_groups[0]["lr"] == 1e-3
