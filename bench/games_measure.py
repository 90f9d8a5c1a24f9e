"""Does GRPO improve the tiny model at Tic Tac Toe (against the random player) and Temporal Clue, on held-out
positions and puzzles, against the base? And at Codenames (both roles, self-play), on held-out boards? Measured on
CPU, reported whatever it shows (docs/examples.md).

    python -m bench.games_measure [--game tictactoe|temporal_clue|codenames|both] [--steps 20] [--seeds 1]
                                  [--held-out 24] [--out DIR]

The model is the tiny games model (training/fixtures/tiny_games_model.py: warmed up on the answer formats only, built
under var/tiny-games-model when missing). Each run trains on the example's generated scenarios with the
environment's own reward and, after its last step, the run's held-out evaluation
(training/monitoring/evaluation.py) plays the held-out positions / puzzles with the checkpoint and with the base: the win rate of checkpoint over base
(ties half) with its 95 % bootstrap interval over scenarios, and each side's mean env reward. One JSON line per
run on stdout.

Skill apart from format: a win over the base can come from the answer format alone (a malformed move loses, a
malformed answer scores nothing). Each line also gives, per side of the held-out match, the share of well-formed
answers (`eval_well_formed_*`: Tic Tac Toe games the agent never fouled, Temporal Clue replies that answer every
question as `N. answer`) and the mean env reward among those only (`eval_env_well_formed_*`: Tic Tac Toe's score
among well-formed games, win 1 and draw 1/2; Temporal Clue's share right among well-formed answers), and the same
two per training step (`train_well_formed_by_step`, `train_env_well_formed_by_step`).

`skill` on each line counts skill apart from format per side (checkpoint, base), over well-formed play only
(bench/games_skill.py): Tic Tac Toe's win / draw / loss rates among well-formed games against the random player
(the run's held-out evaluation games) and against the perfect player (the same held-out positions played again
after the run, minimax as the opponent: draws are the skill there, it never loses); Temporal Clue's share right
among well-formed answers; Codenames' words found per clue. Codenames' held-out boards are played after the run
by the checkpoint and by the base (both roles each: self-play), which gives its team success of checkpoint over
base (`eval_win_rate` and its interval, as the run's evaluation computes them) beside the words per clue.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from bench.games_skill import clue_skill, codenames_skill, comparison_games, tictactoe_skill
from training import run
from training.config import RunConfig
from training.environments import RolloutConfig, get_environment, parse_options
from training.events import EvaluationFinished, Event, GroupScored
from training.fixtures.examples import EXAMPLES, recipe_sections, tiny_recipe
from training.fixtures.tiny_games_model import SFT_STEPS, ensure_tiny_games_model
from training.monitoring.evaluation import BASE, CHECKPOINT, compare_group, win_rate_summary
from training.types import Scenario, Trajectory, first_side

ROOT = Path(__file__).resolve().parents[1]
GAMES = {"tictactoe": ("tictactoe-random", 8), "temporal_clue": ("temporal_clue", 24),
         "codenames": ("codenames", 24)}  # example, max tokens
# --game both: the two whose run holds a held-out evaluation against the base. Codenames' held-out boards are
# played after its run instead (`play_held_out`), where each game's words found per clue can be counted.
EVALUATED = ("tictactoe", "temporal_clue")
SAMPLES = 4  # answers (games) per model per held-out scenario


def held_out_scenarios(game: str, *, seed: int, train: int = 32, held_out: int = 24) -> list[Scenario]:
    """The held-out positions, boards or puzzles of a seed's run: never among its training scenarios."""
    return EXAMPLES[GAMES[game][0]].scenarios(train, held_out, seed=100 + seed)[1]


def game_config(game: str, *, model_dir: Path, out: Path, steps: int, seed: int, train: int = 32,
                held_out: int = 24) -> RunConfig:
    key, max_tokens = GAMES[game]
    example = EXAMPLES[key]
    recipe = tiny_recipe(steps=steps)  # the examples' recipes' settings (training/fixtures/examples.py)
    scenarios, evaluation = example.scenarios(train, held_out, seed=100 + seed)
    evaluation = evaluation if game in EVALUATED else []
    records = [{"id": s.id, "user_message": s.user_message, "reference": s.reference, "metadata": s.metadata}
               for s in scenarios + evaluation]
    return RunConfig.model_validate({
        "name": f"{game}-{seed}", "base_model": str(model_dir), "system_prompt": example.system_prompt,
        "scenarios": records,
        "environment": {"kind": example.environment_kind, "options": example.environment_options},
        "sampling": {"temperature": 1.0, "max_tokens": max_tokens},
        **recipe_sections(recipe),
        "evaluation": {"held_out_ids": [s.id for s in evaluation], "every": steps, "samples": SAMPLES}
        if evaluation else {},
        "steps": steps, "output_dir": str(out), "seed": seed,
    })


class FormatBySteps:
    """An event sink: per step, whether each trained trajectory was well-formed and its env reward; and the last
    held-out evaluation's per-scenario comparisons (its games' well-formedness and env rewards, per side)."""

    def __init__(self) -> None:
        self.steps: dict[int, list[tuple[bool, float | None]]] = {}
        self.evaluation: list[dict[str, Any]] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, EvaluationFinished):
            self.evaluation = list(event.scenarios)
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


async def play_held_out(config: RunConfig, checkpoint: Path, held_out: list[Scenario], *,
                        options: dict[str, Any], samples: int = SAMPLES) -> tuple[dict[str, Any], dict[str, list]]:
    """The held-out scenarios played `samples` times each by the checkpoint and by the base, the environment set
    to `options`: (the evaluation's summary of checkpoint over base on env reward, each side's games as records).
    A game with several seats is counted on its first (the one the run's evaluation compares)."""
    from training.servers import close_client, start_server
    from training.model.adapter import pick_device

    env = get_environment(config.environment.kind)
    rollout = RolloutConfig(config.system_prompt, config.sampling, parse_options(env, options))
    server = start_server(config.server, config.base_model, Path(config.output_dir) / "held-out-server.log",
                          device=pick_device(config.device), chat=config.chat)
    try:
        model = f"{config.name}@held-out"
        server.load_adapter(model, checkpoint)
        client = server.async_client()

        async def games(name: str, scenario: Scenario) -> list[Trajectory]:
            done = await asyncio.gather(*(env.rollout(client, name, scenario, rollout) for _ in range(samples)),
                                        return_exceptions=True)
            return [first_side(r) for r in done if not isinstance(r, BaseException)]

        async def both(scenario: Scenario) -> tuple[list[Trajectory], list[Trajectory]]:
            return await asyncio.gather(games(model, scenario), games(server.model_name, scenario))

        try:
            played = await asyncio.gather(*(both(s) for s in held_out))  # all at once: the server batches them
        finally:
            await close_client(client)
        comparisons, records = [], {CHECKPOINT: [], BASE: []}
        for scenario, (mine, theirs) in zip(held_out, played):
            for t in mine + theirs:
                t.reward = t.env_reward  # the environment's own reward is the score, as in the run
            records[CHECKPOINT] += [t.to_dict() for t in mine]
            records[BASE] += [t.to_dict() for t in theirs]
            compared = compare_group(scenario.id, [CHECKPOINT] * len(mine) + [BASE] * len(theirs), mine + theirs)
            comparisons += [compared] if compared else []
    finally:
        server.stop()
    return win_rate_summary(comparisons, seed=zlib.crc32(f"{config.seed}:held-out".encode())), records


def skill(game: str, config: RunConfig, checkpoint: Path | None, held_out: list[Scenario],
          evaluation: list[dict[str, Any]]) -> dict[str, Any]:
    """The line's `skill` (and, for Codenames, its held-out team success): see the module's docstring."""
    sides = (CHECKPOINT, BASE)
    if game == "temporal_clue":
        return {"skill": {side: clue_skill(comparison_games(evaluation, side)) for side in sides}}
    if checkpoint is None:
        return {}
    if game == "tictactoe":
        summary, games = asyncio.run(play_held_out(
            config, checkpoint, held_out, options={**config.environment.options, "opponent": "perfect"}))
        return {"skill": {
            "vs_random": {side: tictactoe_skill(comparison_games(evaluation, side)) for side in sides},
            "vs_perfect": {**{side: tictactoe_skill(games[side]) for side in sides},
                           **{k: summary[k] for k in ("eval_win_rate", "eval_ci_low", "eval_ci_high")}}}}
    summary, games = asyncio.run(play_held_out(config, checkpoint, held_out, options=config.environment.options))
    return {**{k: v for k, v in summary.items() if k.startswith("eval_") and "well_formed" not in k},
            "skill": {side: codenames_skill(games[side]) for side in sides}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", choices=[*GAMES, "both"], default="both")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--held-out", type=int, default=24, help="held-out scenarios per seed")
    parser.add_argument("--train", type=int, default=32, help="training scenarios per seed")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "games-measure")
    parser.add_argument("--model-dir", type=Path, default=ROOT / "var" / "tiny-games-model")
    parser.add_argument("--warm-up-steps", type=int, default=SFT_STEPS,
                        help="SFT steps of the tiny games model's warm-up (a model built with others is rebuilt)")
    args = parser.parse_args()
    model_dir = ensure_tiny_games_model(args.model_dir, sft_steps=args.warm_up_steps)
    for game in EVALUATED if args.game == "both" else [args.game]:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            out = args.out / f"{game}-{seed}-{int(time.time())}"
            started = time.monotonic()
            formats = FormatBySteps()
            config = game_config(game, model_dir=model_dir, out=out, steps=args.steps, seed=seed,
                                 train=args.train, held_out=args.held_out)
            summary = run(config, sink=formats)
            train_formed, train_skill = formats.by_step()
            history = summary.history
            last = history[-1] if history else {}
            first = history[0] if history else {}
            apart = skill(game, config, summary.last_checkpoint.path if summary.last_checkpoint else None,
                          held_out_scenarios(game, seed=seed, train=args.train, held_out=args.held_out),
                          formats.evaluation)
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
                **apart,
            }), flush=True)
            print(f"{game} seed {seed}: done", file=sys.stderr)


if __name__ == "__main__":
    main()
