"""Builds the tiny offline model that tests and the demo train: no weights are ever downloaded.

`python -m training build-tiny-model DIR` trains a byte-level BPE tokenizer with our chat template, builds a
4-layer Qwen2-architecture model, warms it up with a short SFT pass on synthetic 2048 games so that it answers
in the game's move format some of the time, and saves both with `save_pretrained` (loadable with the ordinary
`from_pretrained`, and by vLLM). Deterministic for a seed; about half a minute on two CPU cores.
"""
from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

from training.chat_format import CHAT_TEMPLATE, END_OF_TURN, render
from training.environments import game_2048_rules as rules
from training.sft import SFTConfig, sft_train

DEMO_SYSTEM_PROMPT = (
    "You play 2048. Reply with one move in a tag: "
    "<move>left</move>, <move>right</move>, <move>up</move> or <move>down</move>."
)
DEMO_USER_MESSAGE = "New game. Board:"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", END_OF_TURN]
BUILD_VERSION = 3  # bump when the recipe changes: cached builds are keyed by it
# Small enough to train in seconds on a CPU; initializer_range 0.1 because at 0.02 GRPO stalls at this size.
MODEL_SHAPE = dict(
    hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=1024, initializer_range=0.1, tie_word_embeddings=True, rope_theta=10000.0,
)
VOCAB_SIZE = 512
# Measured: after 5 steps a game lasts about one well-formed, legal move on average (reward ~0.15-0.2), so
# every group has spread in reward and GRPO has something to learn from; after 8 steps the 20-step demo starts
# at 0.34 and rises less than its held-out test asks. (With GPT-2's split, before build version 3, that took
# 16 steps and 26 left little to learn.) Games of up to 6 turns teach the format at every turn alike:
# with 3-turn games the model learned turn 1 only and RL stalled on groups that all failed at turn 2.
SFT_STEPS = 5


def synthetic_games(count: int, seed: int, max_turns: int = 6) -> list[list[dict]]:
    """Conversations of the demo task: boards from the user, a legal move in the tag from the assistant."""
    rng = random.Random(seed)
    games = []
    for _ in range(count):
        board = rules.new_board(4, rng)
        messages = [
            {"role": "system", "content": DEMO_SYSTEM_PROMPT},
            {"role": "user", "content": f"{DEMO_USER_MESSAGE}\n{rules.render(board)}"},
        ]
        for turn in range(rng.randint(1, max_turns)):
            move = rng.choice(rules.legal_moves(board))
            messages.append({"role": "assistant", "content": f"<move>{move}</move>"})
            board, _ = rules.slide(board, move)
            rules.spawn(board, rng)
            if turn + 1 < max_turns and rules.legal_moves(board):
                messages.append({"role": "user", "content": f"Board:\n{rules.render(board)}"})
            else:
                break
        if messages[-1]["role"] == "user":
            messages.pop()
        games.append(messages)
    return games


def _general_text() -> list[str]:
    # A little ordinary language and JSON so the tokenizer is not only board digits (chat and tool scenarios).
    return [
        "What is the refund policy? Refunds within 30 days of purchase. Contact support@example.com.",
        "The quick brown fox jumps over the lazy dog. Answer the question using only the context.",
        '{"name": "search", "arguments": {"query": "weather in Paris"}} <tool_call> </tool_call>',
        "Hello! How can I help you today? Thank you, goodbye. Yes, no, maybe, please.",
    ] * 20


def build_tokenizer(corpus: list[str], *, vocab_size: int = VOCAB_SIZE,
                    max_length: int = MODEL_SHAPE["max_position_embeddings"]):
    """A byte-level BPE of `vocab_size` trained on `corpus`.

    It splits text as Qwen2's tokenizer does (NFC, then Qwen2's pre-tokenisation regex: digits one by one): for a
    Qwen2 model, transformers rebuilds that pipeline whatever tokenizer.json holds, so a tokenizer split any
    other way would be trained on one tokenisation and served with another (a test saves, reloads, compares).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    core.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=None, eos_token=END_OF_TURN, pad_token="<|endoftext|>",
        unk_token=None, model_max_length=max_length,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(out_dir: str | Path, *, seed: int = 0, sft_steps: int = SFT_STEPS, quiet: bool = False) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    torch.manual_seed(seed)
    games = synthetic_games(2000, seed)
    tokenizer = build_tokenizer([m["content"] for g in games[:400] for m in g] + _general_text())
    # The corpus of the tokenizer does not include the template markup; render a few so merges cover it.
    config = Qwen2Config(
        vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **MODEL_SHAPE,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    sft_train(model, tokenizer, games, SFTConfig(steps=sft_steps, seed=seed, log_every=0 if quiet else 20))
    save_built(model, tokenizer, out, build_version=BUILD_VERSION, seed=seed, sft_steps=sft_steps)
    if not quiet:
        print(f"tiny model saved to {out} ({sum(p.numel() for p in model.parameters())} parameters)", file=sys.stderr)
    return out


def save_built(model: Any, tokenizer: Any, out: Path, **recipe: Any) -> None:
    """Saves the model, its tokenizer and its `recipe` (rubric_studio.json) beside `out`, then renames the folder:
    a crash mid-build never leaves a half-written model behind."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "rubric_studio.json").write_text(json.dumps(recipe))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def built_with(path: Path, **recipe: Any) -> bool:
    """Whether `path` holds a model saved by `save_built` with these recipe values (a cached build to reuse)."""
    meta = path / "rubric_studio.json"
    if not meta.exists():
        return False
    info = json.loads(meta.read_text())
    return all(info.get(key) == value for key, value in recipe.items())


def ensure_tiny_model(path: str | Path, *, seed: int = 0) -> Path:
    """The tiny model at `path`, built first if it is missing or from an older recipe."""
    p = Path(path)
    return p if built_with(p, build_version=BUILD_VERSION, seed=seed) else build_tiny_model(p, seed=seed)


__all__ = ["build_tiny_model", "ensure_tiny_model", "synthetic_games", "DEMO_SYSTEM_PROMPT", "render"]
