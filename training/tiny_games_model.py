"""The tiny offline model's games variant, for measuring Tic Tac Toe and Temporal Clue on CPU (docs/examples.md).

The tiny 2048 model (training/tiny_model.py) never saw a Tic Tac Toe board or a puzzle and answers neither in
their format, so every reward is 0 and GRPO has nothing to compare. This variant (the same 4-layer Qwen2 shape,
a 2048-token context, its own byte-level BPE) is warmed up with SFT on synthetic episodes in the real format
that teach the FORMAT only, never good play or right answers:
- Tic Tac Toe: games against a random player from the example's kind of positions, the agent playing a uniformly
  random legal move each turn;
- Temporal Clue: puzzles of other seeds than any the example generates, each question answered with a random
  value of the asked attribute (right by chance only).
So what RL then improves (winning more often, answering more questions right) is not taught by the warm-up.
Deterministic for a seed; a few minutes on two quiet CPU cores. No weights are downloaded.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

from training.environments import temporal_clue_puzzles as puzzles
from training.environments import tictactoe_rules as ttt
from training.environments.temporal_clue import puzzle_scenario
from training.environments.tictactoe import RULES
from training.examples import EXAMPLES
from training.sft import SFTConfig, sft_train
from training.tiny_model import MODEL_SHAPE as TINY_SHAPE
from training.tiny_model import build_tokenizer, built_with, save_built

BUILD_VERSION = 1
MODEL_SHAPE = {**TINY_SHAPE, "max_position_embeddings": 2048}
VOCAB_SIZE = 1024
SFT_STEPS = 60  # the format is learnt in the first few dozen steps (loss flat from ~25 on, measured)
PUZZLE_SEEDS = range(2_000_000, 2_000_200)  # never a seed the example draws (it samples below 10**6)


def tictactoe_episodes(count: int, seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    prompt = EXAMPLES["tictactoe-random"].system_prompt
    episodes = []
    for _ in range(count):
        board = ttt.random_position(rng, rng.randint(0, 3))
        me = ttt.to_move(board)
        messages = [{"role": "system", "content": prompt}]
        first = True
        while not ttt.is_over(board):
            if ttt.to_move(board) != me:
                board = ttt.play(board, rng.choice(ttt.legal_moves(board)))
                continue
            text = f"Board:\n{ttt.render(board)}"
            messages.append({"role": "user", "content": f"Play Tic Tac Toe to win.\n{RULES}\nYou play {me}.\n{text}"
                             if first else text})
            first = False
            cell = rng.choice(ttt.legal_moves(board))
            messages.append({"role": "assistant", "content": f"<move>{cell}</move>"})
            board = ttt.play(board, cell)
        episodes.append(messages)
    return episodes


def clue_episodes(seeds: range, seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    prompt = EXAMPLES["temporal_clue"].system_prompt
    episodes = []
    for s in seeds:
        scenario = puzzle_scenario(s)
        puzzle = puzzles.generate(s)
        lines = [f"{i}. {rng.choice(puzzle.values[a])}" for i, (_, a) in enumerate(puzzle.questions, start=1)]
        episodes.append([{"role": "system", "content": prompt}, {"role": "user", "content": scenario.user_message},
                         {"role": "assistant", "content": "\n".join(lines)}])
    return episodes


def build_tiny_games_model(out_dir: str | Path, *, seed: int = 0, sft_steps: int = SFT_STEPS,
                           quiet: bool = False) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    torch.manual_seed(seed)
    games, clues = tictactoe_episodes(1500, seed), clue_episodes(PUZZLE_SEEDS, seed)
    corpus = [m["content"] for e in games[:300] + clues[:200] for m in e]
    tokenizer = build_tokenizer(corpus, vocab_size=VOCAB_SIZE, max_length=MODEL_SHAPE["max_position_embeddings"])
    config = Qwen2Config(vocab_size=len(tokenizer), bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **MODEL_SHAPE)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    rng = random.Random(seed)
    mixed = games + clues
    rng.shuffle(mixed)
    sft_train(model, tokenizer, mixed, SFTConfig(steps=sft_steps, seed=seed, max_length=1024,
                                                 log_every=0 if quiet else 25))
    save_built(model, tokenizer, out, build_version=BUILD_VERSION, seed=seed, sft_steps=sft_steps)
    if not quiet:
        print(f"tiny games model saved to {out}", file=sys.stderr)
    return out


def ensure_tiny_games_model(path: str | Path, *, seed: int = 0, sft_steps: int = SFT_STEPS) -> Path:
    p = Path(path)
    if built_with(p, build_version=BUILD_VERSION, seed=seed, sft_steps=sft_steps):
        return p
    return build_tiny_games_model(p, seed=seed, sft_steps=sft_steps)
