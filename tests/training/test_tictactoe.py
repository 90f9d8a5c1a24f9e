from __future__ import annotations

import asyncio
import random

import pytest

from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment, parse_options, tictactoe_rules as rules
from training.rl.groups import rollout_groups
from training.types import Scenario, TrainingError


def play(replies, board=rules.EMPTY, **options):
    env = get_environment("tictactoe")
    config = RolloutConfig("", SamplingConfig(max_tokens=8), parse_options(env, options))
    client = scripted_client(replies)
    result = asyncio.run(env.rollout(client, MODEL, Scenario(id="s", user_message="", metadata={"board": board}),
                                     config))
    return result, client


def test_a_win_on_a_row_a_column_and_a_diagonal_ends_the_game():
    assert rules.winner("XXXOO....") == "X"
    assert rules.winner("O.XO.XO..") == "O"
    assert rules.winner("X.O.XO..X") == "X"
    assert rules.winner("XOXXOOOXX") is None and rules.is_over("XOXXOOOXX")  # a full board: a draw
    assert rules.legal_moves("XXXOO....") == []


def test_a_taken_cell_or_a_cell_off_the_board_is_an_illegal_move():
    with pytest.raises(ValueError, match="not free"):
        rules.play("X........", 1)
    with pytest.raises(ValueError, match="no cell 10"):
        rules.play(rules.EMPTY, 10)
    assert rules.play("X........", 5) == "X...O...."


def test_an_unreachable_or_finished_starting_board_is_refused():
    for board in ["XX.......", "OO.X.....", "XXXOO....", "X"]:
        with pytest.raises(ValueError):
            rules.check_board(board)


def test_the_perfect_player_never_loses_to_a_random_one_from_either_side():
    rng = random.Random(5)
    for game in range(200):
        board, perfect = rules.EMPTY, "XO"[game % 2]
        while not rules.is_over(board):
            moves = rules.best_moves(board) if rules.to_move(board) == perfect else rules.legal_moves(board)
            board = rules.play(board, rng.choice(moves))
        assert rules.winner(board) in (perfect, None), board


def test_the_perfect_player_takes_a_win_and_blocks_a_loss():
    assert rules.best_moves("XX.OO....") == [3]  # X to move: complete the row
    assert rules.best_moves("XX..O....") == [3]  # O to move: block it


def test_a_malformed_reply_loses_the_game_at_once():
    trajectory, client = play(["I think the centre"], opponent="random")
    assert trajectory.env_reward == 0.0
    assert trajectory.metadata["ended"] == "X gave no well-formed move"
    assert len(client.requests) == 1


def test_playing_a_taken_cell_loses_the_game():
    trajectory, _ = play(["<move>1</move>"], board="X...O....", opponent="perfect")
    assert trajectory.env_reward == 0.0 and trajectory.metadata["ended"] == "X played taken cell 1"


def test_the_agent_is_told_its_mark_and_sees_the_board_with_the_free_cells_numbered():
    trajectory, client = play(["<move>3</move>", "<move>7</move>"], board="XX.OO.X..", opponent="random")
    assert trajectory.metadata["mark"] == "O"  # O to move in the starting position: the agent plays O
    first = client.requests[0]["messages"][-1]["content"]
    assert "You play O." in first and "X X 3\nO O 6\nX 8 9" in first


def test_the_agent_that_completes_a_line_wins_with_reward_one():
    trajectory, _ = play(["<move>3</move>"], board="XX.OO....", opponent="perfect")
    assert trajectory.env_reward == 1.0 and trajectory.metadata["winner"] == "X"


def test_a_draw_scores_one_half():
    # X to move on XOXXOO.X.: X at 7 leaves O one cell (9): a draw; X at 9 lets O win at 7.
    trajectory, _ = play(["<move>7</move>"], board="XOXXOO.XO"[:8] + ".", opponent="perfect")
    assert rules.winner(trajectory.metadata["board"]) is None
    assert trajectory.env_reward == 0.5


def test_self_play_gives_one_trajectory_per_side_each_rewarded_from_its_own_side():
    sides, client = play(["<move>1</move>", "<move>4</move>", "<move>2</move>", "<move>5</move>",
                          "<move>3</move>"], opponent="self")
    x, o = sides
    assert (x.role, o.role) == ("x", "o")
    assert (x.env_reward, o.env_reward) == (1.0, 0.0)
    assert [m["content"] for m in x.messages if m["role"] == "assistant"] == ["<move>1</move>", "<move>2</move>",
                                                                             "<move>3</move>"]
    assert [m["content"] for m in o.messages if m["role"] == "assistant"] == ["<move>4</move>", "<move>5</move>"]
    assert "You play O." in o.messages[0]["content"] and "1 2 3" not in o.messages[0]["content"]


def test_in_self_play_an_illegal_move_by_o_is_a_win_for_x():
    (x, o), _ = play(["<move>5</move>", "<move>5</move>"], opponent="self")
    assert (x.env_reward, o.env_reward) == (1.0, 0.0)
    assert x.metadata["ended"] == "O played taken cell 5"


def test_a_model_opponent_is_asked_under_its_own_name_and_its_bad_move_loses():
    trajectory, client = play(["<move>5</move>", "nonsense"], opponent="model", opponent_model=MODEL)
    assert trajectory.env_reward == 1.0 and trajectory.metadata["ended"] == "O gave no well-formed move"
    assert len(client.requests) == 2


def test_against_a_model_the_agents_own_side_comes_back_when_it_plays_o():
    trajectory, client = play(["<move>5</move>", "nonsense"], board="X........", opponent="model",
                              opponent_model="rival")
    assert trajectory.metadata["mark"] == "O" and trajectory.env_reward == 1.0  # the rival's bad move lost
    assert [m["content"] for m in trajectory.messages if m["role"] == "assistant"] == ["<move>5</move>"]
    assert [r["model"] for r in client.requests] == [MODEL, "rival"]


def test_a_model_opponent_needs_its_name():
    with pytest.raises(TrainingError, match="opponent_model"):
        parse_options(get_environment("tictactoe"), {"opponent": "model"})


def test_self_play_forms_one_group_per_role_with_the_sides_of_an_episode_linked():
    env = get_environment("tictactoe")
    config = RolloutConfig("", SamplingConfig(max_tokens=8), parse_options(env, {"opponent": "self"}))
    # Three games, each X plays 1 and then O plays a taken cell: X wins every game.
    client = scripted_client(["<move>1</move>"] * 3 + ["<move>1</move>"] * 3)
    groups = asyncio.run(rollout_groups(env, client, MODEL, Scenario(id="s", user_message=""), config, 3))
    assert [g.role for g in groups] == ["x", "o"]
    assert all(len(g.trajectories) == 3 for g in groups)
    assert [t.env_reward for t in groups[0].trajectories] == [1.0] * 3
    assert sorted(t.episode for t in groups[0].trajectories) == sorted(t.episode for t in groups[1].trajectories)
    assert len({t.episode for t in groups[0].trajectories}) == 3


def test_a_game_says_whether_each_side_played_well_formed_moves_format_apart_from_skill():
    (x, o), _ = play(["<move>5</move>", "<move>5</move>"], opponent="self")  # O plays the taken cell
    assert (x.metadata["well_formed"], o.metadata["well_formed"]) == (True, False)
    lost, _ = play(["no move"])  # against the random player
    assert lost.metadata["well_formed"] is False and lost.env_reward == 0.0
    illegal, _ = play(["<move>1</move>"], board="X.......O")  # cell 1 is taken
    assert illegal.metadata["well_formed"] is False
    won, _ = play(["<move>5</move>", "nonsense"], opponent="model", opponent_model=MODEL)  # the rival fouled
    assert won.metadata["well_formed"] is True and won.env_reward == 1.0
