"""`temporal_clue`: deduction puzzles (who had what, where, and when) with one right answer and their own reward.

The scenario carries the puzzle's seed and size in its metadata (`seed`, `people`, `questions`); the puzzle is
regenerated from them (training/environments/temporal_clue_puzzles.py), so the answers never travel with the
scenario the agent sees. The agent answers every question in one reply, one line each as `N. answer`. The
reward is the share of questions answered right; a judge may add a score for the reasoning (a blended run).
"""
from __future__ import annotations

from typing import Any

from training.environments import register, temporal_clue_puzzles as puzzles
from training.environments.base import Environment, RolloutConfig, add_turn, complete, new_trajectory, opening_messages
from training.types import Scenario, TrainingError, Trajectory


def scenario_puzzle(scenario: Scenario) -> puzzles.Puzzle:
    meta = scenario.metadata
    if "seed" not in meta:
        raise TrainingError(f"temporal_clue scenario {scenario.id!r} has no puzzle seed in its metadata; generate "
                            "the scenario set from the Temporal Clue example")
    return puzzles.generate(int(meta["seed"]), people=int(meta.get("people", 4)),
                            questions=int(meta.get("questions", 3)))


def puzzle_scenario(seed: int, *, people: int = 4, questions: int = 3) -> Scenario:
    """A scenario for the puzzle of this seed: its text as the user message, the seed in the metadata."""
    puzzle = puzzles.generate(seed, people=people, questions=questions)
    reference = "\n".join(f"{i}. {a}" for i, a in enumerate(puzzle.answers(), start=1))
    return Scenario(id=f"clue-{seed}", user_message=puzzle.text(), reference=reference,
                    metadata={"seed": seed, "people": people, "questions": questions})


@register("temporal_clue")
class TemporalClueEnvironment(Environment):
    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return True

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        puzzle = scenario_puzzle(scenario)
        # The puzzle's text is the scenario's message; a user who edited it still gets the seed's questions.
        trajectory = new_trajectory(scenario, opening_messages(
            Scenario(id=scenario.id, user_message=scenario.user_message or puzzle.text()), config.system_prompt))
        turn = await complete(client, model, trajectory.messages, config.sampling)
        add_turn(trajectory, turn)
        reply = str(turn.message.get("content") or "")
        reward, right = puzzles.score_answers(reply, puzzle.answers())
        trajectory.env_reward = reward
        trajectory.metadata.update(right=right, questions=len(right),
                                   well_formed=puzzles.well_formed(reply, len(right)))
        return trajectory
