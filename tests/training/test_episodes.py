"""The rules of an episode: a side that never moved is not a side of that game, and a trajectory that sampled no
token is neither trained nor rewarded (training/types.py, training/rl/groups.py)."""
from __future__ import annotations

import asyncio

import pytest

from tests.training.scripted_policy import MODEL, scripted_client
from training.config import GRPOConfig, SamplingConfig
from training.environments import RolloutConfig, codenames_rules, get_environment, parse_options
from training.rl.groups import rollout_groups, score_group
from training.types import Scenario, Trajectory, TrajectoryGroup, env_reward_scorer


def _groups(kind: str, options: dict, replies: list[str], size: int, metadata: dict | None = None):
    env = get_environment(kind)
    config = RolloutConfig("", SamplingConfig(max_tokens=16), parse_options(env, options))
    scenario = Scenario(id="s", user_message="", metadata=metadata or {})
    groups = asyncio.run(rollout_groups(env, scripted_client(replies), MODEL, scenario, config, size))
    for group in groups:
        asyncio.run(score_group(group, env_reward_scorer, GRPOConfig(group_size=size)))
    return groups


def test_in_self_play_o_is_not_part_of_a_game_that_x_lost_by_a_malformed_first_move():
    # Two games: X's first move is malformed in the first (O wins without moving); in the second X plays 1 and
    # O plays the taken cell 1 (X wins).
    x, o = _groups("tictactoe", {"opponent": "self"}, ["no move", "<move>1</move>", "<move>1</move>"], 2)
    assert sorted(t.env_reward for t in x.trajectories) == [0.0, 1.0]
    assert [t.metadata["ended"] for t in o.trajectories] == ["O played taken cell 1"]
    assert o.skipped  # one game with O in it: nothing to compare, nothing trains
    assert all(t.completion_tokens > 0 for g in (x, o) for t in g.trajectories)


def test_in_codenames_the_guesser_is_not_part_of_a_game_whose_first_clue_was_refused():
    ours = [w for w, side in codenames_rules.new_game(4).key.items() if side == codenames_rules.OURS]
    spy, guesser = _groups("codenames", {"play": "both", "rounds": 1},
                           ["no clue", "<clue>zebra 1</clue>", f"<guess>{ours[0]}</guess>"], 2, {"seed": 4})
    assert sorted(t.env_reward for t in spy.trajectories) == pytest.approx([0.0, 0.1])
    assert len(guesser.trajectories) == 1 and guesser.trajectories[0].env_reward == pytest.approx(0.1)


def test_a_trajectory_that_sampled_no_token_gets_no_reward_and_leaves_the_others_advantages_alone():
    answered = Trajectory("s", [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}],
                          turn_token_ids=[[1, 2]], env_reward=0.0, completion_tokens=2)
    # An external agent's turn let in without sampled ids (allow_unsampled) is re-tokenised: it has tokens.
    unsampled = Trajectory("s", [{"role": "assistant", "content": "an answer"}], turn_token_ids=[None], env_reward=1.0)
    empty_ids = Trajectory("s", [{"role": "user", "content": "go"}, {"role": "assistant", "content": ""}],
                           turn_token_ids=[[]], env_reward=1.0)
    never_moved = Trajectory("s", [{"role": "user", "content": "go"}], env_reward=1.0)
    group = TrajectoryGroup(Scenario("s", "go"), [answered, unsampled, empty_ids, never_moved])
    asyncio.run(score_group(group, env_reward_scorer, GRPOConfig(group_size=4)))
    assert [t.reward for t in group.trajectories] == [0.0, 1.0, None, None]
    assert [t.advantage for t in group.trajectories] == [pytest.approx(-0.5), pytest.approx(0.5), None, None]
