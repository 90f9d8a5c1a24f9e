"""`game_2048`: a multi-turn game with its own verifiable reward.

Each user message shows the board; the agent answers a move as <move>left|right|up|down</move>. A reply
without a well-formed move, or a move that does not change the board, ends the game. The reward (0..1):
1.0 for reaching the winning tile, otherwise 0.6 × (valid moves / max_turns) + 0.4 × log2(max tile) /
log2(winning tile). The starting board comes from the scenario (metadata `seed`, else its id), so every
trajectory of a group plays the same game.
"""
from __future__ import annotations

import math
import random
import re
import zlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from training.environments import game_2048_rules as rules
from training.environments import register
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory
from training.types import Scenario, Trajectory

MOVE = re.compile(r"^\s*<move>(left|right|up|down)</move>\s*$")


class Game2048Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(4, ge=2, le=8)
    winning_tile: int = Field(64, ge=8, description="A power of two.")
    max_turns: int = Field(8, ge=1, le=500)


def game_reward(valid_moves: int, top_tile: int, options: Game2048Options) -> float:
    if top_tile >= options.winning_tile:
        return 1.0
    return 0.6 * valid_moves / options.max_turns + 0.4 * math.log2(max(top_tile, 1)) / math.log2(options.winning_tile)


@register("game_2048")
class Game2048Environment(Environment):
    Options = Game2048Options

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return True

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        options: Game2048Options = config.options  # type: ignore[assignment]
        seed = scenario.metadata.get("seed", zlib.crc32(scenario.id.encode()))
        rng = random.Random(seed)
        board = rules.new_board(options.size, rng)
        messages = [{"role": "system", "content": config.system_prompt}] if config.system_prompt else []
        messages.append({"role": "user", "content": f"{scenario.user_message}\n{rules.render(board)}"})
        trajectory = new_trajectory(scenario, messages)
        valid, ended = 0, "turn limit"
        for _ in range(options.max_turns):
            turn = await complete(client, model, trajectory.messages, config.sampling)
            add_turn(trajectory, turn)
            match = MOVE.match(turn.message["content"] or "")
            if not match:
                ended = "no well-formed move"
                break
            moved, _ = rules.slide(board, match.group(1))
            if moved == board:
                ended = f"illegal move {match.group(1)}"
                break
            board, valid = moved, valid + 1
            rules.spawn(board, rng)
            if rules.max_tile(board) >= options.winning_tile:
                ended = "won"
                break
            if not rules.legal_moves(board):
                ended = "no moves left"
                break
            trajectory.messages.append({"role": "user", "content": f"Board:\n{rules.render(board)}"})
        trajectory.env_reward = game_reward(valid, rules.max_tile(board), options)
        trajectory.metadata.update(valid_moves=valid, max_tile=rules.max_tile(board), ended=ended)
        return trajectory
