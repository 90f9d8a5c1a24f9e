"""`tictactoe`: Tic Tac Toe against an opponent, or against itself, with its own verifiable reward.

The starting position comes from the scenario (metadata `board`, 9 characters of X, O and '.'; the empty board
when absent), so a group plays the same position and held-out positions evaluate. At each of its turns a
player sees the board as text and answers one move as `<move>N</move>` (N the cell, 1..9). A reply without a
well-formed move, or a move to a taken cell, ends the game as that player's loss. Reward: win 1, draw 0.5,
loss 0.

Opponents (`opponent`): `random`, `perfect` (minimax: it never loses), `model` (another name the run's server
serves: the base model, or an adapter `<run>@<step>`), or `self`: the policy plays both sides, and each episode
gives two trajectories, roles `x` and `o` (training/types.py), each rewarded from its own side.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.environments import register, tictactoe_rules as rules
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory
from training.types import Message, Scenario, Trajectory

MOVE = re.compile(r"^\s*<move>\s*([1-9])\s*</move>\s*$")
RULES = ("Tic Tac Toe on a 3x3 board; three of your marks in a row, column or diagonal wins. Free cells show "
         "their numbers. Answer with your move only, as <move>N</move> where N is a free cell.")


class TicTacToeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opponent: Literal["random", "perfect", "self", "model"] = Field(
        "random", description="Who plays the other side: a random player, a perfect one (minimax), the policy "
        "itself (self-play: one trajectory per side), or another served model named in `opponent_model`.")
    opponent_model: str = Field(
        "", max_length=300, description="With opponent 'model': the name the run's server serves it under (the "
        "base model's name, or a loaded adapter `<run>@<step>`).")

    @model_validator(mode="after")
    def _model_named(self) -> "TicTacToeOptions":
        if (self.opponent == "model") != bool(self.opponent_model):
            raise ValueError("opponent_model is required with opponent 'model', and only then")
        return self


@dataclass
class Seat:
    """One side's conversation; `trajectory` is None for a scripted opponent."""

    mark: str
    trajectory: Trajectory | None
    model: str = ""
    moved: bool = False
    opening: str = ""
    notes: list[str] = field(default_factory=list)


def starting_board(scenario: Scenario) -> str:
    return rules.check_board(str(scenario.metadata.get("board") or rules.EMPTY))


def side_reward(mark: str, winner: str | None) -> float:
    return 0.5 if winner is None else 1.0 if winner == mark else 0.0


def parse_move(text: str) -> int | None:
    match = MOVE.match(text or "")
    return int(match.group(1)) if match else None


@register("tictactoe")
class TicTacToeEnvironment(Environment):
    Options = TicTacToeOptions

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return True

    @classmethod
    def roles(cls, options: BaseModel) -> list[str]:
        return ["x", "o"] if getattr(options, "opponent", "") == "self" else [""]

    async def rollout(self, client: Any, model: str, scenario: Scenario,
                      config: RolloutConfig) -> Trajectory | list[Trajectory]:
        options: TicTacToeOptions = config.options  # type: ignore[assignment]
        board = starting_board(scenario)
        me = rules.to_move(board)
        seats = {mark: self._seat(mark, scenario, config, options, model, me) for mark in "XO"}
        rng = random.Random()
        winner, ended, fouled = None, "", ""  # fouled: the mark whose malformed or illegal move ended the game
        while not rules.is_over(board):
            seat = seats[rules.to_move(board)]
            cell = await self._move(seat, board, client, config, options, rng)
            if cell is None or cell not in rules.legal_moves(board):
                winner, fouled = "O" if seat.mark == "X" else "X", seat.mark
                ended = f"{seat.mark} {'gave no well-formed move' if cell is None else f'played taken cell {cell}'}"
                break
            board = rules.play(board, cell)
        else:
            winner = rules.winner(board)
            ended = f"{winner} won" if winner else "draw"
        played = [s for s in seats.values() if s.trajectory is not None]
        for seat in played:
            seat.trajectory.env_reward = side_reward(seat.mark, winner)
            seat.trajectory.metadata.update(mark=seat.mark, board=board, ended=ended, winner=winner or "draw",
                                            opponent=options.opponent, well_formed=fouled != seat.mark)
        if options.opponent == "self":
            return [seats["X"].trajectory, seats["O"].trajectory]  # type: ignore[list-item]
        return seats[me].trajectory  # type: ignore[return-value]  # a model opponent's own side is not trained

    @staticmethod
    def _seat(mark: str, scenario: Scenario, config: RolloutConfig, options: TicTacToeOptions, model: str,
              me: str) -> Seat:
        policy = options.opponent == "self" or mark == me
        if not policy and options.opponent != "model":
            return Seat(mark, None)
        system: list[Message] = [{"role": "system", "content": config.system_prompt}] if config.system_prompt else []
        trajectory = new_trajectory(scenario, system)
        if options.opponent == "self":
            trajectory.role = mark.lower()
        opening = f"{scenario.user_message}\n{RULES}\nYou play {mark}." if scenario.user_message else \
            f"{RULES}\nYou play {mark}."
        return Seat(mark, trajectory, model if policy else options.opponent_model, opening=opening)

    @staticmethod
    async def _move(seat: Seat, board: str, client: Any, config: RolloutConfig, options: TicTacToeOptions,
                    rng: random.Random) -> int | None:
        if seat.trajectory is None:  # a scripted opponent
            moves = rules.best_moves(board) if options.opponent == "perfect" else rules.legal_moves(board)
            return rng.choice(moves)
        text = f"Board:\n{rules.render(board)}"
        seat.trajectory.messages.append({"role": "user", "content": text if seat.moved else
                                         f"{seat.opening}\n{text}"})
        seat.moved = True
        turn = await complete(client, seat.model, seat.trajectory.messages, config.sampling)
        add_turn(seat.trajectory, turn)
        return parse_move(str(turn.message.get("content") or ""))
