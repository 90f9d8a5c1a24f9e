from __future__ import annotations

import asyncio
import random

import pytest

from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, codenames_rules as rules, get_environment, parse_options
from training.types import Scenario, TrainingError

SEED = 4


def words_of(side: str, seed: int = SEED) -> list[str]:
    game = rules.new_game(seed)
    return [w for w in game.board if game.key[w] == side]


def play(replies, **options):
    env = get_environment("codenames")
    config = RolloutConfig("", SamplingConfig(max_tokens=16), parse_options(env, options))
    client = scripted_client(replies)
    result = asyncio.run(env.rollout(client, MODEL, Scenario(id="b", user_message="", metadata={"seed": SEED}),
                                     config))
    return result, client


def test_a_board_has_25_distinct_words_from_the_list_and_a_key_of_8_8_1_8():
    game = rules.new_game(SEED)
    assert len(set(game.board)) == 25 and set(game.board) <= set(rules.words())
    counts = {side: list(game.key.values()).count(side) for side in (rules.OURS, rules.THEIRS, rules.ASSASSIN,
                                                                       rules.NEUTRAL)}
    assert counts == {rules.OURS: 8, rules.THEIRS: 8, rules.ASSASSIN: 1, rules.NEUTRAL: 8}
    assert rules.new_game(SEED).board == game.board and rules.new_game(SEED + 1).board != game.board


def test_picking_the_assassin_ends_the_game_at_once_with_reward_zero():
    game = rules.new_game(SEED)
    ours, assassin = words_of(rules.OURS), words_of(rules.ASSASSIN)[0]
    shown = rules.reveal(game, [ours[0], assassin, ours[1]], number=3)
    assert shown == [(ours[0], rules.OURS), (assassin, rules.ASSASSIN)]
    assert game.over == "the guesser picked the assassin" and rules.reward(game) == 0.0
    assert ours[1] not in game.revealed


def test_the_other_teams_word_or_a_neutral_word_ends_the_round():
    game = rules.new_game(SEED)
    ours, theirs = words_of(rules.OURS), words_of(rules.THEIRS)
    assert rules.reveal(game, [theirs[0], ours[0]], number=2) == [(theirs[0], rules.THEIRS)]
    assert game.found == 0 and not game.over
    neutral = words_of(rules.NEUTRAL)[0]
    assert rules.reveal(game, [ours[0], neutral, ours[1]], number=2)[-1] == (neutral, rules.NEUTRAL)
    assert game.found == 1


def test_at_most_number_plus_one_picks_count():
    game = rules.new_game(SEED)
    ours = words_of(rules.OURS)
    assert len(rules.reveal(game, ours[:5], number=1)) == 2 and game.found == 2


def test_finding_every_word_of_ours_wins_and_the_other_team_finishing_first_loses():
    game = rules.new_game(SEED)
    rules.reveal(game, words_of(rules.OURS), number=8)
    assert game.over == "all our words found" and rules.reward(game) == 1.0
    game = rules.new_game(SEED)
    rng = random.Random(0)
    while rules.their_turn(game, rng):
        pass
    assert game.over == "the other team found all its words first" and rules.reward(game) == 0.0


def test_a_clue_on_the_board_or_with_a_bad_number_is_refused():
    game = rules.new_game(SEED)
    word = game.board[0]
    assert "on the board" in rules.parse_clue(f"<clue>{word} 2</clue>", game)
    assert "between 1 and 8" in rules.parse_clue("<clue>zebra 9</clue>", game)
    assert rules.parse_clue("the answer is zebra", game).startswith("no clue")
    assert rules.parse_clue("<clue>Zebra 2</clue>", game) == ("zebra", 2)


def test_self_play_gives_the_spymaster_and_the_guesser_one_trajectory_each_with_the_same_reward():
    ours = words_of(rules.OURS)
    (spy, guesser), client = play(["<clue>zebra 2</clue>", f"<guess>{ours[0]}, {ours[1]}</guess>",
                                   "nothing useful"], rounds=3)
    assert (spy.role, guesser.role) == ("spymaster", "guesser")
    assert spy.env_reward == guesser.env_reward == pytest.approx(0.8 * 2 / 8)
    assert spy.metadata["ended"].startswith("spymaster: no clue") and spy.metadata["clues"] == ["zebra 2"]
    assert "(ours)" in client.requests[0]["messages"][-1]["content"]  # the spymaster sees the key ...
    guesser_view = client.requests[1]["messages"][-1]["content"]
    assert "(ours)" not in guesser_view and "Clue: zebra 2" in guesser_view  # ... the guesser does not
    assert f"{ours[0]} was ours" in client.requests[2]["messages"][-1]["content"]  # news of the last round


def test_the_guesser_picking_the_assassin_costs_both_roles_everything():
    assassin = words_of(rules.ASSASSIN)[0]
    (spy, guesser), _ = play(["<clue>zebra 1</clue>", f"<guess>{assassin}</guess>"])
    assert spy.env_reward == guesser.env_reward == 0.0


def test_one_role_with_a_partner_model_gives_only_that_roles_trajectory():
    ours = words_of(rules.OURS)
    guesser, client = play(["<clue>zebra 1</clue>", f"<guess>{ours[0]}</guess>"], play="guesser",
                           partner_model="partner", rounds=1)
    assert guesser.role == "guesser" and guesser.env_reward == pytest.approx(0.1)
    assert [r["model"] for r in client.requests] == ["partner", MODEL]


def test_playing_one_role_needs_a_partner():
    with pytest.raises(TrainingError, match="partner_model"):
        parse_options(get_environment("codenames"), {"play": "spymaster"})
