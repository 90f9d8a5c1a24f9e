"""Our local server speaks each family's chat format: it samples every turn from the prompt the trainer renders
for it, and parses the family's tool calls so that re-rendering the parsed message gives back the sampled ids."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.training.test_chat_families import CONVERSATION, NAMES, SPECS, TOOLS, conversation_for, ids, published, \
    published_turns, trained_runs
from training.model.chat_format import encode_conversation, end_of_turn_ids


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """Per family, our engine over a tiny random model that carries the family's tokenizer and published
    template (its weights do not matter: what it samples is not looked at)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from training.servers.engine import Engine

    built = {}
    torch.manual_seed(0)
    for name in NAMES:
        path = tmp_path_factory.mktemp(name)
        tokenizer, _ = published(name)
        tokenizer.save_pretrained(path)
        config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048)
        Qwen2ForCausalLM(config).save_pretrained(path)
        built[name] = Engine(str(path), "base", 8, "cpu")
    yield built
    for engine in built.values():
        engine.stop()


def trainer_tokenizer(engine, name: str):
    """The tokenizer a trainer loads from the same model directory (its published template, not installed)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(engine.model_dir)
    assert not hasattr(tokenizer, "studio_chat_family")
    eos = [tokenizer.convert_tokens_to_ids(t) for t in SPECS[name]["generation_eos"]]
    generation = SimpleNamespace(eos_token_id=eos)
    return tokenizer, generation


@pytest.mark.parametrize("name", NAMES)
def test_the_server_samples_each_turn_from_the_prompt_the_trainer_trains_it_after(engines, name):
    engine = engines[name]
    messages = conversation_for(name)
    tokenizer, generation = trainer_tokenizer(engine, name)
    input_ids, mask = encode_conversation(tokenizer, messages, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    starts = [i for i in range(len(mask)) if mask[i] and (i == 0 or not mask[i - 1])]
    turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    for k, start in zip(turns, starts, strict=True):
        reply = engine.chat({"model": "base", "messages": messages[:k], "tools": TOOLS, "max_tokens": 1,
                             "temperature": 0, "return_token_ids": True})
        assert reply["prompt_token_ids"] == input_ids[:start], f"{name}: turn {k}"


@pytest.mark.parametrize("name", NAMES)
def test_the_server_parses_the_familys_tool_call_and_training_renders_exactly_the_sampled_ids(engines, name):
    engine = engines[name]
    tokenizer, generation = trainer_tokenizer(engine, name)
    sampled = ids(tokenizer, published_turns(name, conversation_for(name))[0])  # the Paris call, as a model writes it
    choice = engine._choice(0, SimpleNamespace(token_ids=sampled, logprobs=[0.0] * len(sampled),
                                               finish_reason="stop"), [], TOOLS, False)
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_weather", {"city": "Paris"})
    trajectory = [*CONVERSATION[:2], choice["message"]]
    input_ids, mask = encode_conversation(tokenizer, trajectory, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    assert trained_runs(input_ids, mask) == [sampled]


@pytest.mark.parametrize("name", NAMES)
def test_the_server_stops_at_the_familys_end_of_turn_marker(engines, name):
    engine = engines[name]
    assert engine.tokenizer.convert_tokens_to_ids(SPECS[name]["end_of_turn"]) in engine.stop_ids
