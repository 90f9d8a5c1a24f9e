"""The SFT demo's scripted teacher plays 2048 by the rules over real HTTP (the openai client, as any teacher is
called), and distillation keeps each game's best play by the game's own reward."""
from __future__ import annotations

import asyncio
import random

from training.environments import RolloutConfig, game_2048_rules as rules, get_environment, parse_options
from training.fixtures.demo import demo_config
from training.fixtures.demo_teacher import Teacher2048, choose_move, parse_board
from training.sft.distill import distil
from training.types import Scenario, env_reward_scorer


def test_the_board_is_read_back_from_the_rendered_message_and_every_move_is_legal():
    rng = random.Random(3)
    for _ in range(50):
        board = rules.new_board(4, rng)
        for _ in range(rng.randint(0, 8)):
            if not rules.legal_moves(board):
                break
            board, _ = rules.slide(board, rng.choice(rules.legal_moves(board)))
            rules.spawn(board, rng)
        assert parse_board(f"Board:\n{rules.render(board)}") == board
        move = choose_move(board, rng, greedy=0.5)
        assert move is None if not rules.legal_moves(board) else move in rules.legal_moves(board)
    merge = [[2, 2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert choose_move(merge, rng, greedy=1.0) in ("left", "right")  # greedy: the move that merges


def test_distilling_the_teacher_keeps_each_games_best_play(tmp_path):
    from openai import AsyncOpenAI

    base = demo_config(out_dir=tmp_path, model_dir=tmp_path)
    env = get_environment("game_2048")
    rollout = RolloutConfig(base.system_prompt, base.sampling, parse_options(env, base.environment.options))
    scenarios = [Scenario(id=f"g{k}", user_message=base.scenarios[0].user_message, metadata={"seed": 70 + k})
                 for k in range(6)]
    async def play(base_url: str) -> list:
        client = AsyncOpenAI(base_url=base_url, api_key="demo")
        try:
            return await distil(scenarios=scenarios, env=env, client=client, model="teacher-2048", n=4,
                                rollout_config=rollout, scorer=env_reward_scorer, threshold=0.5)
        finally:
            await client.close()

    with Teacher2048(greedy=0.5, seed=1) as teacher:
        results = asyncio.run(play(teacher.base_url))
        assert teacher.requests >= 6 * 4 * 2  # several turns per game, each answer on its own request
    assert [r.scenario_id for r in results] == [s.id for s in scenarios]
    for result in results:
        assert result.candidates == 4 and result.reward == max(result.rewards)  # the best of the four
        moves = [m["content"] for m in result.messages if m["role"] == "assistant"]
        assert moves and all(m.startswith("<move>") for m in moves)  # every move well formed and legal
        assert result.reward >= 0.6  # all six turns played: a rules-following teacher never ends a game early
