"""Example agents the field trains (docs/examples.md): 2048, Tic Tac Toe, Codenames and Temporal Clue. Each is an
agent (system prompt, environment and its options, sampling) and a scenario set generated on demand from
seeds: starting positions, boards, puzzles; the held-out ones never overlap the training ones, so the evaluation
asks about positions, boards and puzzles training never saw.

`EXAMPLES[key].scenarios(count, held_out, seed)` -> (train, held_out), used by the web app's "New agent from
an example" (docs/examples.md).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from training.environments import tictactoe_rules
from training.environments.temporal_clue import puzzle_scenario
from training.tiny_model import DEMO_SYSTEM_PROMPT, DEMO_USER_MESSAGE
from training.types import Scenario

MAX_SCENARIOS = 500
# The deployment's catalogue name for the tiny games model (training/tiny_games_model.py), warmed up on the Tic Tac
# Toe and Temporal Clue formats; an example whose model the deployment offers gets it by default.
GAMES_MODEL = "tiny-games"
# The catalogue's tiny offline model (training/tiny_model.py), warmed up on 2048 moves: every deployment has it
# unless it removes it (webapp/model_catalogue.py), so the 2048 example trains offline, as `make demo` does.
TINY_2048_MODEL = "tiny-2048"


def _games_2048(count: int, seed: int) -> list[Scenario]:
    """New games, each from its own starting board (the environment deals it from the scenario's seed)."""
    seeds = random.Random(seed).sample(range(10**6), count)
    return [Scenario(id=f"game-{s}", user_message=DEMO_USER_MESSAGE, metadata={"seed": s}) for s in seeds]


def _tictactoe(count: int, seed: int) -> list[Scenario]:
    """Distinct positions 0 to 3 plies from the empty board (the empty board first)."""
    rng, boards = random.Random(seed), [tictactoe_rules.EMPTY]
    while len(boards) < count:
        board = tictactoe_rules.random_position(rng, rng.randint(1, 3))
        if board not in boards:
            boards.append(board)
    return [Scenario(id=f"ttt-{b.replace('.', '_')}", user_message="Play Tic Tac Toe to win.",
                     metadata={"board": b}) for b in boards[:count]]


def _codenames(count: int, seed: int) -> list[Scenario]:
    seeds = random.Random(seed).sample(range(10**6), count)
    return [Scenario(id=f"board-{s}", user_message="Play this Codenames board.", metadata={"seed": s})
            for s in seeds]


def _temporal_clue(count: int, seed: int) -> list[Scenario]:
    return [puzzle_scenario(s) for s in random.Random(seed).sample(range(10**6), count)]


@dataclass(frozen=True)
class Example:
    key: str
    title: str
    summary: str
    system_prompt: str
    environment_kind: str
    generate: Callable[[int, int], list[Scenario]]
    environment_options: dict[str, Any] = field(default_factory=dict)
    max_tokens: int = 32
    temperature: float = 1.0
    model: str = ""  # the catalogue name of a model warmed up for it ("": none)

    def scenarios(self, count: int, held_out: int, seed: int = 0) -> tuple[list[Scenario], list[Scenario]]:
        """`count` training scenarios and `held_out` others for the evaluation, all distinct."""
        if not 1 <= count or not 0 <= held_out or count + held_out > MAX_SCENARIOS:
            raise ValueError(f"ask for 1 to {MAX_SCENARIOS} scenarios in all (training plus held out)")
        every = self.generate(count + held_out, seed)
        return every[:count], every[count:]


EXAMPLES: dict[str, Example] = {e.key: e for e in [
    Example("game_2048", "2048 moves",
            "Plays a few moves of 2048 from a dealt board; the game scores them (a move that keeps the board open "
            "and builds bigger tiles scores higher).",
            DEMO_SYSTEM_PROMPT, "game_2048", _games_2048, {"winning_tile": 64, "max_turns": 6}, max_tokens=12,
            model=TINY_2048_MODEL),
    Example("tictactoe-random", "Tic Tac Toe against a random player",
            "Plays one side of a position against a random opponent; win 1, draw 0.5, loss or bad move 0.",
            "You play Tic Tac Toe. Answer with your move only, as <move>N</move>.", "tictactoe",
            _tictactoe, {"opponent": "random"}, max_tokens=12, model=GAMES_MODEL),
    Example("tictactoe-self", "Tic Tac Toe against itself",
            "Self-play: the policy plays X and O; each episode gives one trajectory per side, groups per side.",
            "You play Tic Tac Toe. Answer with your move only, as <move>N</move>.", "tictactoe",
            _tictactoe, {"opponent": "self"}, max_tokens=12, model=GAMES_MODEL),
    Example("codenames", "Codenames: spymaster and guesser",
            "Two roles that must cooperate on a generated 5x5 board; both are rewarded from the game.",
            "You play Codenames with a teammate. Answer in the form asked for, and nothing else.", "codenames",
            _codenames, {"play": "both", "rounds": 3}, max_tokens=24),
    Example("temporal_clue", "Temporal Clue: who, with what, where, when",
            "Deduction puzzles with exactly one solution; the reward is the share of questions answered right.",
            "Solve the puzzle. Reason briefly, then answer each question on its own line as `N. answer`.",
            "temporal_clue", _temporal_clue, max_tokens=256, model=GAMES_MODEL),
]}
