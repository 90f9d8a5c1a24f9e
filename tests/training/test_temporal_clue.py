from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.training.scripted_policy import MODEL, scripted_client
from training.config import SamplingConfig
from training.environments import RolloutConfig, get_environment, parse_options, temporal_clue_puzzles as puzzles
from training.environments.temporal_clue import puzzle_scenario
from training.types import Scenario, TrainingError


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**31), people=st.integers(min_value=2, max_value=4))
def test_every_generated_puzzle_has_exactly_one_solution_and_it_is_the_hidden_one(seed, people):
    puzzle = puzzles.generate(seed, people=people)
    assert puzzles.solve(puzzle) == [puzzle.solution]


def test_a_known_puzzle_has_one_solution_found_by_the_solver():
    people, values = ["Ada", "Bruno"], {"object": ["rope", "lantern"], "place": ["garden", "study"],
                                        "time": ["8 pm", "9 pm"]}
    clues = [puzzles.Clue("Ada had the rope.", lambda a: a[0][0] == 0),
             puzzles.Clue("The person in the study arrived at 8 pm.", lambda a: a[2][a[1].index(1)] == 0),
             puzzles.Clue("Bruno arrived before Ada.", lambda a: a[2][1] < a[2][0])]
    puzzle = puzzles.Puzzle(people, values, clues, questions=[("Ada", "place"), ("Bruno", "object")])
    [only] = puzzles.solve(puzzle)
    puzzle.solution = only
    assert puzzle.answers() == ["garden", "lantern"]  # Bruno came first, so he was in the study; Ada had the rope
    one_short = puzzles.Puzzle(people, values, clues[:2], questions=[])
    assert len(puzzles.solve(one_short)) > 1  # a clue short: not unique


def test_the_same_seed_gives_the_same_puzzle_and_the_text_asks_every_question():
    a, b = puzzles.generate(11), puzzles.generate(11)
    assert a.text() == b.text() and a.answers() == b.answers()
    assert a.text().count("?") == 3


def test_answers_score_the_share_right_ignoring_case_articles_and_later_repeats():
    reward, right = puzzles.score_answers("Reasoning...\n1. The Kitchen\n2. rope\n2. lantern\n", ["kitchen", "lantern",
                                                                                                  "9 pm"])
    assert right == [True, False, False] and reward == pytest.approx(1 / 3)
    assert puzzles.score_answers("no idea", ["kitchen"])[0] == 0.0


def test_the_environment_rewards_the_share_of_right_answers_from_the_seed_not_the_text():
    scenario = puzzle_scenario(5)
    answers = puzzles.generate(5).answers()
    env = get_environment("temporal_clue")
    config = RolloutConfig("", SamplingConfig(max_tokens=64), parse_options(env, {}))
    reply = f"1. {answers[0]}\n2. {answers[1]}\n3. nowhere"
    trajectory = asyncio.run(env.rollout(scripted_client([reply]), MODEL, scenario, config))
    assert trajectory.env_reward == pytest.approx(2 / 3) and trajectory.metadata["right"] == [True, True, False]
    assert scenario.reference and answers[0] in scenario.reference


def test_a_scenario_without_a_seed_is_refused_with_how_to_make_one():
    env = get_environment("temporal_clue")
    config = RolloutConfig("", SamplingConfig(max_tokens=8), parse_options(env, {}))
    with pytest.raises(TrainingError, match="no puzzle seed"):
        asyncio.run(env.rollout(scripted_client(["1. x"]), MODEL, Scenario(id="s", user_message="?"), config))


@pytest.mark.parametrize("given", ["at the library", "In the Library.", "**library**", "the library", "`library`",
                                   "He was in the library"])
def test_a_place_is_right_however_a_person_would_write_it(given):
    assert puzzles.score_answers(f"1. {given}", ["library"])[1] == [True]


@pytest.mark.parametrize("given, answer", [("at 9 p.m.", "9 pm"), ("9pm", "9 pm"), ("9:00 PM", "9 pm"),
                                           ("12 am", "midnight"), ("had the rope", "rope"), ("At midnight.", "midnight")])
def test_times_and_objects_are_read_as_a_person_reads_them(given, answer):
    assert puzzles.score_answers(f"1. {given}", [answer])[1] == [True]


@pytest.mark.parametrize("given", ["not the library", "the library or the kitchen", "kitchen", "library room",
                                   "10 pm", "19 pm", ""])
def test_a_wrong_or_hedged_answer_is_still_wrong(given):
    assert puzzles.score_answers(f"1. {given}", ["library" if "pm" not in given else "9 pm"])[1] == [False]


def test_a_reply_is_well_formed_when_every_question_has_an_answer_line_right_or_wrong():
    assert puzzles.well_formed("1. kitchen\n2. the rope\n3. 9 pm", 3)
    assert puzzles.well_formed("Thinking...\n1. cellar\n2. candlestick\n3. 1 am", 3)  # all wrong, still in form
    assert not puzzles.well_formed("1. kitchen\n2. rope", 3) and not puzzles.well_formed("1. kitchen\n2. \n3. x", 3)
    assert not puzzles.well_formed("kitchen, rope, 9 pm", 3)
