from __future__ import annotations

import pytest

from training.environments import get_environment, parse_options, tictactoe_rules
from training.environments.temporal_clue import scenario_puzzle
from training.environments.temporal_clue_puzzles import solve
from training.fixtures.examples import EXAMPLES


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_each_example_generates_distinct_scenarios_with_held_out_ones_apart(key):
    example = EXAMPLES[key]
    parse_options(get_environment(example.environment_kind), example.environment_options)  # options the env takes
    train, held_out = example.scenarios(12, 4, seed=3)
    ids = [s.id for s in train + held_out]
    assert len(train) == 12 and len(held_out) == 4 and len(set(ids)) == 16
    again, _ = example.scenarios(12, 4, seed=3)
    assert [s.id for s in again] == [s.id for s in train]  # generated on demand, the same for the same seed


def test_tic_tac_toe_positions_are_playable_and_temporal_clue_puzzles_unique():
    for s in EXAMPLES["tictactoe-random"].scenarios(30, 0)[0]:
        tictactoe_rules.check_board(s.metadata["board"])
    for s in EXAMPLES["temporal_clue"].scenarios(3, 2)[1]:
        assert len(solve(scenario_puzzle(s))) == 1


def test_asking_for_too_many_scenarios_is_refused():
    with pytest.raises(ValueError, match="1 to 500"):
        EXAMPLES["codenames"].scenarios(450, 100)
