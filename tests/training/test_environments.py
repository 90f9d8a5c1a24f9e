from __future__ import annotations

import random

import pytest

from training.environments import game_2048_rules as rules, get_environment, parse_options
from training.environments.game_2048 import Game2048Options, game_reward
from training.environments.tools import calculator
from training.types import TrainingError


def test_sliding_left_merges_each_pair_once():
    board = [[2, 2, 2, 2], [4, 0, 4, 8], [0, 0, 0, 2], [2, 4, 8, 16]]
    moved, gained = rules.slide(board, "left")
    assert moved == [[4, 4, 0, 0], [8, 8, 0, 0], [2, 0, 0, 0], [2, 4, 8, 16]]
    assert gained == 4 + 4 + 8


def test_sliding_down_and_right_mirror_left():
    board = [[2, 0, 0, 0], [2, 0, 0, 0], [0, 0, 0, 0], [4, 0, 0, 2]]
    assert rules.slide(board, "down")[0] == [[0, 0, 0, 0], [0, 0, 0, 0], [4, 0, 0, 0], [4, 0, 0, 2]]
    assert rules.slide(board, "right")[0] == [[0, 0, 0, 2], [0, 0, 0, 2], [0, 0, 0, 0], [0, 0, 4, 2]]


def test_a_move_that_changes_nothing_is_not_legal():
    board = [[2, 4], [4, 2]]
    assert rules.legal_moves(board) == []
    assert "left" not in rules.legal_moves([[2, 0], [4, 0]])


def test_a_new_board_has_two_tiles_and_is_deterministic_for_a_seed():
    a, b = rules.new_board(4, random.Random(7)), rules.new_board(4, random.Random(7))
    assert a == b
    assert sum(v > 0 for row in a for v in row) == 2


def test_game_reward_grows_with_valid_moves_and_tiles_and_winning_is_best():
    options = Game2048Options(winning_tile=64, max_turns=6)
    assert game_reward(0, 2, options) == pytest.approx(0.4 * 1 / 6)
    assert game_reward(6, 8, options) == pytest.approx(0.6 + 0.4 * 3 / 6)
    assert game_reward(3, 64, options) == 1.0


def test_unknown_environment_names_the_registered_ones():
    with pytest.raises(TrainingError, match="unknown environment 'nope'.*chat.*game_2048.*tools"):
        get_environment("nope")


def test_bad_environment_options_name_the_key():
    with pytest.raises(TrainingError, match="max_turns"):
        parse_options(get_environment("game_2048"), {"max_turns": 0})
    with pytest.raises(TrainingError, match="colour"):
        parse_options(get_environment("game_2048"), {"colour": "red"})


def test_calculator_evaluates_arithmetic_and_refuses_anything_else():
    assert calculator("2 + 3 * 4") == "14"
    with pytest.raises(ValueError):
        calculator("__import__('os').system('true')")


def test_calculator_refuses_powers_that_would_block_the_event_loop():
    assert calculator("2 ** 10") == "1024"
    with pytest.raises(ValueError, match="exponents of at most 64"):
        calculator("9 ** 9 ** 9")


def test_resume_finds_the_newest_checkpoint_past_step_9999(tmp_path):
    import json

    from training.model.checkpoints import checkpoint_dir, latest_checkpoint

    for step in (9998, 9999, 10000):
        path = checkpoint_dir(tmp_path, step)
        path.mkdir(parents=True)
        (path / "state.json").write_text(json.dumps({"step": step, "adapter_name": f"r@{step}"}))
    assert latest_checkpoint(tmp_path).step == 10000
