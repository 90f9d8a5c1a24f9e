"""The games warm-up teaches the answer formats, not the games: its data, checked without building the model."""
from __future__ import annotations

import random

from training.environments import codenames_rules as rules, temporal_clue_puzzles as puzzles, tictactoe_rules as ttt
from training.environments.codenames import BRIEF, GUESSER, SPYMASTER, round_news
from training.environments.tictactoe import parse_move
from training.fixtures.examples import EXAMPLES
from training.fixtures.tiny_games_model import (CODENAMES_SEEDS, PUZZLE_SEEDS, clue_episodes, codenames_episodes,
                                                tictactoe_episodes)


def test_warm_up_moves_are_well_formed_legal_and_uniformly_random_not_good_play():
    episodes = tictactoe_episodes(200, seed=1)
    perfect = total = 0
    for messages in episodes:
        for m in messages:
            if m["role"] == "assistant":
                assert parse_move(m["content"]) is not None
    # The first move of each episode, against the perfect player's choice on its board: chance level, not better.
    for messages in episodes:
        board_text = messages[1]["content"].rsplit("Board:\n", 1)[1]
        cells = board_text.split()
        board = "".join(c if c in "XO" else "." for c in cells)
        move = parse_move(messages[2]["content"])
        assert move in ttt.legal_moves(board)
        perfect += move in ttt.best_moves(board)
        total += 1
    assert perfect / total < 0.9  # a perfect teacher would score 1.0


def test_warm_up_puzzles_are_never_the_examples_and_their_answers_are_right_by_chance_only():
    example_seeds = {s.metadata["seed"] for s in EXAMPLES["temporal_clue"].scenarios(300, 100, seed=0)[0]}
    assert not example_seeds & set(PUZZLE_SEEDS)
    episodes = clue_episodes(range(PUZZLE_SEEDS.start, PUZZLE_SEEDS.start + 40), seed=0)
    shares = [puzzles.score_answers(e[2]["content"], puzzles.generate(PUZZLE_SEEDS.start + i).answers())[0]
              for i, e in enumerate(episodes)]
    assert all(e[2]["content"].startswith("1. ") for e in episodes)
    assert 0.05 < sum(shares) / len(shares) < 0.6  # about 1 in 4 values: chance


def test_warm_up_codenames_games_follow_the_rules_on_other_boards_and_never_use_the_key():
    example_seeds = {s.metadata["seed"] for s in EXAMPLES["codenames"].scenarios(300, 100, seed=0)[0]}
    assert not example_seeds & set(CODENAMES_SEEDS)
    episodes = codenames_episodes(60, seed=0, rounds=3)
    assert len(episodes) == 120  # the spymaster's and the guesser's side of each game
    ours = picks = 0
    for index, (spymaster, guesser) in enumerate(zip(episodes[::2], episodes[1::2])):
        game, their_rng = rules.new_game(CODENAMES_SEEDS.start + index), random.Random(CODENAMES_SEEDS.start + index + 1)
        assert spymaster[1]["content"].startswith(BRIEF[SPYMASTER]) and guesser[1]["content"].startswith(BRIEF[GUESSER])
        clues = [m["content"] for m in spymaster if m["role"] == "assistant"]
        guesses = [m["content"] for m in guesser if m["role"] == "assistant"]
        assert len(clues) == len(guesses) >= 1
        for clue, guess in zip(clues, guesses):
            parsed = rules.parse_clue(clue, game)
            assert isinstance(parsed, tuple), parsed  # the rules accept it on the board as it stands
            words = rules.parse_guesses(guess)
            assert words and len(words) <= parsed[1] + 1 and set(words) <= set(game.unrevealed())
            ours += game.key[words[0]] == rules.OURS
            picks += 1
            round_news(game, words, parsed[1], their_rng)  # the game replayed as the environment plays it
            if game.over:
                break
    assert 0.1 < ours / picks < 0.55  # the first pick is ours about 8 times in 25: chance, not the key
