"""Skill apart from format (bench/games_skill.py): counted over well-formed play only, so a game lost by a malformed
move never counts as a loss of skill, and a model that only learnt the format shows no gain in skill."""
from __future__ import annotations

import asyncio

import pytest

from bench.games_skill import clue_skill, codenames_skill, comparison_games, tictactoe_skill
from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, codenames_rules, get_environment, parse_options
from training.types import Scenario


def game(reward: float, formed: bool = True, **metadata) -> dict:
    return {"env_reward": reward, "metadata": {"well_formed": formed, **metadata}}


def test_tic_tac_toe_rates_count_well_formed_games_only():
    games = [game(1.0), game(0.5), game(0.5), game(0.0), game(0.0, formed=False)]  # the last: a malformed move
    assert tictactoe_skill(games) == {"games": 5, "well_formed": 0.8, "win": 0.25, "draw": 0.5, "loss": 0.25}
    # Against the perfect player: draws are the skill; the fouled game is no loss of skill.
    perfect = [game(0.5), game(0.5), game(0.0), game(0.0, formed=False), game(0.0, formed=False)]
    assert tictactoe_skill(perfect) == {"games": 5, "well_formed": 0.6, "win": 0.0, "draw": 0.667, "loss": 0.333}


def test_a_model_that_only_learnt_the_format_gains_well_formed_games_not_skill():
    base = [game(1.0), game(0.0)] + [game(0.0, formed=False)] * 2  # half its games fouled
    checkpoint = [game(1.0), game(0.0), game(1.0), game(0.0)]  # never fouls, wins as often when it plays
    assert sum(g["env_reward"] for g in checkpoint) > sum(g["env_reward"] for g in base)  # the raw score rose
    assert tictactoe_skill(checkpoint)["win"] == tictactoe_skill(base)["win"] == 0.5  # the skill did not


def test_no_well_formed_game_gives_no_rate_rather_than_zero():
    assert tictactoe_skill([game(0.0, formed=False)]) == {"games": 1, "well_formed": 0.0, "win": None, "draw": None,
                                                         "loss": None}
    assert tictactoe_skill([])["well_formed"] is None


def test_codenames_counts_words_found_per_clue_the_guesser_answered_in_form():
    games = [
        game(0.2, found=2, clues=["river 2"], ended="rounds ran out"),
        # Two clues, the second answered with no guesses: only the first counts, the game is malformed.
        game(0.1, found=1, clues=["sun 1", "moon 2"], ended="guesser: no guesses in the form <guess>word, word"
                                                                 "</guess>"),
        # The spymaster's second clue was refused: its first clue counts (found 0).
        game(0.0, found=0, clues=["wind 1"], ended="spymaster: the clue is a word on the board"),
        game(0.0, found=1, clues=["fire 3"], ended="the guesser picked the assassin"),
    ]
    assert codenames_skill(games) == {"games": 4, "well_formed": 0.5, "clues": 4, "found": 4, "words_per_clue": 1.0}
    assert codenames_skill([game(0.0, found=0, clues=[], ended="spymaster: no clue in the form <clue>word "
                                                                 "N</clue>")])["words_per_clue"] is None


def test_temporal_clue_share_right_is_over_well_formed_answers():
    answers = [game(1.0), game(0.5), game(0.25, formed=False), game(0.0, formed=False)]
    assert clue_skill(answers) == {"answers": 4, "well_formed": 0.5, "right_well_formed": 0.75}


def test_the_evaluations_comparisons_give_each_sides_game_records():
    scenarios = [
        {"checkpoint_formed": [True, True], "checkpoint_env_formed": [1.0, 0.5],
         "base_formed": [True, False], "base_env_formed": [0.0]},
        {"checkpoint_formed": [False, True], "checkpoint_env_formed": [1.0],
         "base_formed": [False, False], "base_env_formed": []},
    ]
    assert tictactoe_skill(comparison_games(scenarios, "checkpoint")) == {
        "games": 4, "well_formed": 0.75, "win": 0.667, "draw": 0.333, "loss": 0.0}
    assert tictactoe_skill(comparison_games(scenarios, "base")) == {
        "games": 4, "well_formed": 0.25, "win": 0.0, "draw": 0.0, "loss": 1.0}


def _played(kind: str, options: dict, replies: list[str], metadata: dict) -> dict:
    env = get_environment(kind)
    config = RolloutConfig("", SamplingConfig(max_tokens=16), parse_options(env, options))
    result = asyncio.run(env.rollout(scripted_client(replies), MODEL, Scenario("s", "", metadata=metadata), config))
    return (result[0] if isinstance(result, list) else result).to_dict()


def test_the_counts_read_what_the_games_themselves_record():
    fouled = _played("tictactoe", {"opponent": "perfect"}, ["no move"], {"board": "........."})
    assert tictactoe_skill([fouled])["well_formed"] == 0.0 and tictactoe_skill([fouled])["loss"] is None
    ours = [w for w, side in codenames_rules.new_game(4).key.items() if side == codenames_rules.OURS]
    played = _played("codenames", {"play": "both", "rounds": 2},
                     ["<clue>zebra 2</clue>", f"<guess>{ours[0]}, {ours[1]}</guess>", "<clue>zebra 1</clue>",
                      "I do not know"], {"seed": 4})
    assert played["metadata"]["found"] == 2 and len(played["metadata"]["clues"]) == 2
    assert codenames_skill([played]) == pytest.approx(
        {"games": 1, "well_formed": 0.0, "clues": 1, "found": 2, "words_per_clue": 2.0})
