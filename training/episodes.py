"""Episodes with several players: one rollout (an episode) may give several trajectories, one per role the
policy played (`x` and `o` in self-play, `spymaster` and `guesser` in Codenames), each with its own messages
and reward. Groups form per (scenario, role), so advantages compare like with like; the loop and the judge see
ordinary groups. Every side of an episode carries the same `episode` id: the web app links them ("the other
side of this game").

An environment that plays one part returns a Trajectory (role ""); one that plays several returns a list and
names its roles in `Environment.roles(options)`, in the order its groups are numbered.
"""
from __future__ import annotations

import uuid
from typing import Any

from training.types import Scenario, Trajectory, TrajectoryGroup


def episode_sides(result: Trajectory | list[Trajectory]) -> list[Trajectory]:
    """The trajectories of one episode, each stamped with the episode's id (a fresh one)."""
    sides = result if isinstance(result, list) else [result]
    if not sides or not all(isinstance(t, Trajectory) for t in sides):
        raise ValueError(f"an environment's rollout returned {type(result).__name__}, not trajectories")
    episode = uuid.uuid4().hex[:16]
    for side in sides:
        side.episode = episode
    return sides


def first_side(result: Trajectory | list[Trajectory]) -> Trajectory:
    """The episode's first role's trajectory: what evaluation and distillation compare (a game's first seat)."""
    return episode_sides(result)[0]


def groups_by_role(scenario: Scenario, roles: list[str], episodes: list[Any]) -> list[TrajectoryGroup]:
    """One group per role, in `roles`' order, from the episodes' results (a Trajectory, a list of them, or an
    exception, recorded as an error in every role's group: a failed episode is a failed rollout of each side)."""
    groups = {role: TrajectoryGroup(scenario=scenario, trajectories=[], role=role) for role in roles}
    for result in episodes:
        if isinstance(result, BaseException):
            for group in groups.values():
                group.errors.append(f"{type(result).__name__}: {result}")
            continue
        for side in episode_sides(result):
            if side.role not in groups:
                raise ValueError(f"a rollout returned a trajectory for role {side.role!r}; the environment's "
                                 f"roles are {roles}")
            groups[side.role].trajectories.append(side)
    return list(groups.values())
