"""The prompt budget of the model families users bring (training.model.prompt_budget): counted with the trainer's own
rendering (training.model.chat_format.prompt_ids), the run's chat family and reasoning setting applied, so the budget
of an opening prompt is exactly the tokens the trainer puts before the first trained token. Tokenizers and
published templates: tests/training/chat_families (see test_chat_families.py)."""
from __future__ import annotations

import pytest

from tests.training.test_chat_families import NAMES, TOOLS, published
from training.config import ChatConfig, parse_run_config
from training.environments.base import opening_messages
from training.model.chat_format import encode_conversation, end_of_turn_ids
from training.model.chat_templates import install
from training.model.preflight import preflight
from training.model.prompt_budget import prompt_budget
from training.types import Scenario

SYSTEM = "You answer questions about the weather."
SCENARIO = Scenario(id="paris", user_message="What is the weather in Paris?", context="It is June.")
CASES = [(name, "keep") for name in NAMES] + [("qwen3", "drop")]


def trainer_prompt_tokens(name: str, reasoning: str) -> int:
    """How many tokens the trainer renders before the first token it trains, installed as the trainer installs."""
    tokenizer, generation = published(name)
    install(tokenizer, reasoning=reasoning)
    messages = opening_messages(SCENARIO, SYSTEM) + [{"role": "assistant", "content": "Sunny, 18 C."}]
    _, mask = encode_conversation(tokenizer, messages, TOOLS, end_ids=end_of_turn_ids(tokenizer, generation))
    return mask.index(1)


@pytest.mark.parametrize("name,reasoning", CASES)
def test_the_budget_of_each_family_is_the_trainers_own_count_of_the_prompt(name, reasoning):
    tokenizer, _ = published(name)  # as the launch check loads it: the published template, nothing installed
    budget = prompt_budget(tokenizer, context=4096, system_prompt=SYSTEM, tools=TOOLS, scenarios=[SCENARIO],
                           max_tokens=64, chat=ChatConfig(reasoning=reasoning))
    assert budget.prompt == trainer_prompt_tokens(name, reasoning)


def test_counting_leaves_the_callers_tokenizer_as_it_was():
    tokenizer, _ = published("qwen3")
    template = tokenizer.chat_template
    prompt_budget(tokenizer, context=4096, system_prompt=SYSTEM, tools=TOOLS, scenarios=[SCENARIO], max_tokens=64,
                  chat=ChatConfig(reasoning="drop"))
    assert tokenizer.chat_template == template
    assert getattr(tokenizer, "studio_chat_family", None) is None


def test_the_launch_check_counts_the_empty_think_block_of_a_run_that_drops_reasoning(tmp_path):
    from transformers import Qwen3Config

    tokenizer, _ = published("qwen3")
    tokenizer.save_pretrained(tmp_path)
    Qwen3Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                max_position_embeddings=512).save_pretrained(tmp_path)
    kept = trainer_prompt_tokens("qwen3", "keep")
    assert trainer_prompt_tokens("qwen3", "drop") > kept

    def problems(reasoning: str) -> list[str]:
        return preflight(parse_run_config({
            "base_model": str(tmp_path), "system_prompt": SYSTEM, "chat": {"reasoning": reasoning},
            "sampling": {"max_tokens": 512 - kept},  # exactly what is left after the prompt with reasoning kept
            "environment": {"kind": "chat"},
            "scenarios": [{"id": "paris", "user_message": SCENARIO.user_message, "context": SCENARIO.context}]}),
            tools=TOOLS)

    assert problems("keep") == []
    [problem] = problems("drop")
    assert "the prompt does not fit the model" in problem and "paris" in problem
