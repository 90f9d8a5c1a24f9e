"""Qwen2-architecture models of real sizes with random weights, built from a config (no download).

For GPU tests and benchmarks of the trainer: the shapes of Qwen2.5-0.5B, -1.5B and -7B (their published config
fields), our byte-level tokenizer and chat template, and synthetic conversations of a chosen length.
"""
from __future__ import annotations

import random
from pathlib import Path

from training.tiny_model import _general_text, build_tokenizer, synthetic_games
from training.types import Scenario, Trajectory, TrajectoryGroup

SHAPES = {
    "tiny": dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=8192, tie_word_embeddings=True),
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


def build_synthetic_model(out_dir: str | Path, size: str, *, seed: int = 0) -> Path:
    """Saves a random-weight Qwen2 model of `size` (a key of SHAPES) in bfloat16, with a tokenizer; returns the path."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(_general_text())
    config = Qwen2Config(**SHAPES[size], max_position_embeddings=32768,
                         rope_theta=1000000.0, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: a 7B model in float32 first would take 30 GB more
    try:
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def synthetic_groups(groups: int, group_size: int, *, reply_words: int, seed: int = 0) -> list[TrajectoryGroup]:
    """2048 conversations whose assistant replies are stretched to about `reply_words` words, with advantages."""
    rng = random.Random(seed)
    games = synthetic_games(groups * group_size, seed=seed, max_turns=2)
    words = " ".join(_general_text()[:4]).split()
    out = []
    for g in range(groups):
        trajectories = []
        for i in range(group_size):
            messages = games[g * group_size + i]
            for m in messages:
                if m["role"] == "assistant":
                    m["content"] += " " + " ".join(rng.choice(words) for _ in range(reply_words))
            trajectories.append(Trajectory(f"s{g}", messages, advantage=rng.uniform(-1.5, 1.5)))
        out.append(TrajectoryGroup(Scenario(f"s{g}", "2048"), trajectories))
    return out
