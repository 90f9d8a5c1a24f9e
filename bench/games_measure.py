"""Does GRPO improve the tiny model at Tic Tac Toe (against the random player) and Temporal Clue, on held-out
positions and puzzles, against the base? And Codenames' training curve (both roles, self-play). Measured on CPU,
reported whatever it shows (docs/examples.md).

    python -m bench.games_measure [--game tictactoe|temporal_clue|codenames|both] [--steps 20] [--seeds 1] [--out DIR]

The model is the tiny games model (training/tiny_games_model.py: warmed up on the answer formats only, built
under var/tiny-games-model when missing). Each run trains on the example's generated scenarios with the
environment's own reward and, after its last step, the run's held-out evaluation (training/evaluation.py) plays
the held-out positions / puzzles with the checkpoint and with the base: the win rate of checkpoint over base
(ties half) with its 95 % bootstrap interval over scenarios, and each side's mean env reward. One JSON line per
run on stdout.

Skill apart from format: a win over the base can come from the answer format alone (a malformed move loses, a
malformed answer scores nothing). Each line also gives, per side of the held-out match, the share of well-formed
answers (`eval_well_formed_*`: Tic Tac Toe games the agent never fouled, Temporal Clue replies that answer every
question as `N. answer`) and the mean env reward among those only (`eval_env_well_formed_*`: Tic Tac Toe's score
among well-formed games, win 1 and draw 1/2; Temporal Clue's share right among well-formed answers), and the same
two per training step (`train_well_formed_by_step`, `train_env_well_formed_by_step`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from training.config import RunConfig
from training.events import Event, GroupScored
from training.examples import EXAMPLES
from training.loop import run
from training.tiny_games_model import ensure_tiny_games_model

ROOT = Path(__file__).resolve().parents[1]
GAMES = {"tictactoe": ("tictactoe-random", 8), "temporal_clue": ("temporal_clue", 24),
         "codenames": ("codenames", 24)}  # example, max tokens
# --game both: the two with a held-out match against the base. Codenames' policy plays both roles (its partner is
# itself), so only its training curve is measured.
EVALUATED = ("tictactoe", "temporal_clue")


def game_config(game: str, *, model_dir: Path, out: Path, steps: int, seed: int, train: int = 32,
                held_out: int = 24) -> RunConfig:
    key, max_tokens = GAMES[game]
    example = EXAMPLES[key]
    held_out = held_out if game in EVALUATED else 0
    scenarios, evaluation = example.scenarios(train, held_out, seed=100 + seed)
    records = [{"id": s.id, "user_message": s.user_message, "reference": s.reference, "metadata": s.metadata}
               for s in scenarios + evaluation]
    return RunConfig.model_validate({
        "name": f"{game}-{seed}", "base_model": str(model_dir), "system_prompt": example.system_prompt,
        "scenarios": records,
        "environment": {"kind": example.environment_kind, "options": example.environment_options},
        "sampling": {"temperature": 1.0, "max_tokens": max_tokens},
        "grpo": {"group_size": 8, "groups_per_step": 4, "learning_rate": 2e-3, "micro_batch_size": 16,
                 "max_grad_norm": 1.0},
        "lora": {"r": 8, "alpha": 16},
        "evaluation": {"held_out_ids": [s.id for s in evaluation], "every": steps, "samples": 4} if evaluation else {},
        "steps": steps, "output_dir": str(out), "seed": seed,
    })


class FormatBySteps:
    """An event sink: per step, whether each trained trajectory was well-formed and its env reward."""

    def __init__(self) -> None:
        self.steps: dict[int, list[tuple[bool, float | None]]] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, GroupScored):
            self.steps.setdefault(event.step, []).extend(
                (bool(t["metadata"]["well_formed"]), t.get("env_reward")) for t in event.trajectories
                if "well_formed" in (t.get("metadata") or {}))

    def by_step(self) -> tuple[list[float | None], list[float | None]]:
        """(share well-formed, mean env reward among well-formed) per step, in step order."""
        shares, skill = [], []
        for step in sorted(self.steps):
            rows = self.steps[step]
            formed = [r for ok, r in rows if ok and r is not None]
            shares.append(round(sum(ok for ok, _ in rows) / len(rows), 3) if rows else None)
            skill.append(round(sum(formed) / len(formed), 3) if formed else None)
        return shares, skill


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=[*GAMES, "both"], default="both")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "games-measure")
    parser.add_argument("--model-dir", type=Path, default=ROOT / "var" / "tiny-games-model")
    args = parser.parse_args()
    model_dir = ensure_tiny_games_model(args.model_dir)
    for game in EVALUATED if args.game == "both" else [args.game]:
        for seed in range(args.seeds):
            out = args.out / f"{game}-{seed}-{int(time.time())}"
            started = time.monotonic()
            formats = FormatBySteps()
            summary = run(game_config(game, model_dir=model_dir, out=out, steps=args.steps, seed=seed),
                          sink=formats)
            train_formed, train_skill = formats.by_step()
            history = summary.history
            last = history[-1] if history else {}
            first = history[0] if history else {}
            print(json.dumps({
                "game": game, "seed": seed, "steps": summary.steps_done,
                "minutes": round((time.monotonic() - started) / 60, 1),
                "train_env_first_step": first.get("env_mean"), "train_env_last_step": last.get("env_mean"),
                "train_env_by_step": [round(h["env_mean"], 3) if h.get("env_mean") is not None else None
                                      for h in history],
                "train_well_formed_by_step": train_formed, "train_env_well_formed_by_step": train_skill,
                **{k: last.get(k) for k in ("eval_win_rate", "eval_ci_low", "eval_ci_high", "eval_env_checkpoint",
                                            "eval_env_base", "eval_scenarios", "eval_samples",
                                            "eval_well_formed_checkpoint", "eval_well_formed_base",
                                            "eval_env_well_formed_checkpoint", "eval_env_well_formed_base")},
            }), flush=True)
            print(f"{game} seed {seed}: done", file=sys.stderr)


if __name__ == "__main__":
    main()
