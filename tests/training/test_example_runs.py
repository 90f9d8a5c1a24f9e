"""A run of each game example on its own settings (system prompt, environment options, answer length, generated
scenarios) never trains or rewards a trajectory that sampled no token: in self-play, a side the game ended before
it moved (X's malformed first move, a refused first clue) is not a side of that game (training/types.py).

The tests' tiny model does not know the games' formats, so the games it plays end on malformed answers, mostly at
the first one: the case that left a 0-token side with reward 1.0 before (issue 46)."""
from __future__ import annotations

import pytest

from tests.training.configs import small_config
from training import run
from training.events import GroupScored
from training.fixtures.examples import EXAMPLES


def _events(kind):
    seen: list = []
    return seen, lambda event: seen.append(event) if isinstance(event, kind) else None


@pytest.mark.parametrize("key", ["tictactoe-self", "codenames", "temporal_clue"])
def test_a_run_on_the_examples_settings_never_rewards_or_trains_a_side_that_sampled_nothing(key, tiny_model_dir,
                                                                                         tmp_path):
    example = EXAMPLES[key]
    train, _ = example.scenarios(4, 0, seed=1)
    config = small_config(
        tiny_model_dir, tmp_path, steps=1, grpo={"groups_per_step": 1}, system_prompt=example.system_prompt,
        environment={"kind": example.environment_kind, "options": dict(example.environment_options)},
        scenarios=[{"id": s.id, "user_message": s.user_message, "reference": s.reference, "metadata": s.metadata}
                   for s in train],
        # The example's answer length, except Temporal Clue's: its puzzle fills most of the tiny model's context.
        sampling={"temperature": example.temperature, "max_tokens": min(example.max_tokens, 32)})
    groups, sink = _events(GroupScored)
    assert run(config, sink=sink).status == "completed"
    roles = {g.role for g in groups}
    assert roles == ({"x", "o"} if key == "tictactoe-self" else {"spymaster", "guesser"} if key == "codenames"
                     else {""})
    trajectories = [t for g in groups for t in g.trajectories]
    assert trajectories
    for t in trajectories:
        moved = any(m["role"] == "assistant" for m in t["messages"]) and t["completion_tokens"] > 0
        if len(roles) > 1:  # a side that never moved is not in its role's group at all
            assert moved, t["metadata"]
        if t["reward"] is not None or t["advantage"] is not None:
            assert moved, t["metadata"]
