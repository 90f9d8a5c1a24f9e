"""Episodes with several players: one rollout (an episode) may give several trajectories, one per role the
policy played (`x` and `o` in self-play, `spymaster` and `guesser` in Codenames), each with its own messages
and reward. Groups form per (scenario, role), so advantages compare like with like; the loop and the judge see
ordinary groups. Every side of an episode carries the same `episode` id: the web app links them ("the other
side of this game").

An environment that plays one part returns a Trajectory (role ""); one that plays several returns a list and
names its roles in `Environment.roles(options)`, in the order its groups are numbered.

A side that sampled nothing (the game ended before its first turn: X's malformed first move, a spymaster's
refused first clue) is not a side of that game: it leaves its role's group, so its outcome neither trains nor
moves the advantages of the sides that played (`sampled_nothing`).
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


def sampled_nothing(trajectory: Trajectory) -> bool:
    """True for a trajectory with no token of its own to train on: no assistant turn, or only turns whose sampled
    ids came back empty. A turn sent without ids (an unsampled external turn, retokenised) counts as tokens."""
    turns = [m for m in trajectory.messages if m.get("role") == "assistant"]
    ids = trajectory.turn_token_ids
    return not turns or (len(ids) == len(turns) and all(i is not None and not i for i in ids))


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
        sides = episode_sides(result)
        for side in sides:
            if len(sides) > 1 and sampled_nothing(side):
                continue  # it never moved: not a side of this game
            if side.role not in groups:
                raise ValueError(f"a rollout returned a trajectory for role {side.role!r}; the environment's "
                                 f"roles are {roles}")
            groups[side.role].trajectories.append(side)
    return list(groups.values())
