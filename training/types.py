"""The records the engine passes around: scenarios, trajectories, groups, scores and episodes; its error.

They are plain dataclasses so that the web app and the judge can build and read them without the engine's
heavy imports; `to_dict` gives the JSON that crosses into events and the database.
"""
from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Protocol

Message = dict[str, Any]  # an OpenAI chat message: role, content, optional tool_calls / tool_call_id / name


def trajectory_label(index: int) -> str:
    """A trajectory's one name within its group (0 → A, 25 → Z, 26 → AA), from its rollout position: letters,
    so a label is never mistaken for a rank or a score. The judge's explanations and every page use it."""
    label = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        label = chr(ord("A") + rest) + label
    return label


@dataclass
class Scenario:
    id: str
    user_message: str
    context: str | None = None
    reference: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """One agent attempt at one scenario.

    `turn_token_ids[i]` holds the token ids the server sampled for the i-th assistant message (None when the
    server did not return them); the trainer uses them so it trains on exactly what was sampled.
    `turn_logprobs[i]` holds the server's log-probs of those tokens (None when not returned): the trainer reports
    its gap to its own log-probs, and can correct it by truncated importance sampling.
    """

    scenario_id: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    turn_token_ids: list[list[int] | None] = field(default_factory=list)
    turn_logprobs: list[list[float] | None] = field(default_factory=list)
    # Per assistant turn, why the server stopped ("stop", "length": cut off at max_tokens, "tool_calls"; "" unknown).
    finish_reasons: list[str] = field(default_factory=list)
    env_reward: float | None = None
    judge_score: float | None = None
    explanation: str = ""
    criteria: dict[str, float] = field(default_factory=dict)
    reward: float | None = None  # the reward GRPO uses (effective: judge, env, override or a blend)
    advantage: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    completion_tokens: int = 0
    role: str = ""  # the part played in a game with several players ("x", "spymaster"); "" for one player
    episode: str = ""  # shared by every side of one episode (training/types.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class JudgeReport:
    """What judging one group cost, set on the group by a judge scorer and emitted by the loop as a JudgeUsage
    event. `calls` are the per-request records (JSON): prompt_hash, tokens, cost_usd, latency_s, cache_hit,
    raw_reply, rejected. Only requests really sent count in `requests`, tokens and `cost_usd`; cache hits are
    counted apart in `cache_hits`."""

    judge_model: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0  # None when a sent request's price is unknown (never read as free)
    identical: bool = False  # every trajectory was the same: nothing to rank, the judge was not asked
    truncated: list[int] = field(default_factory=list)  # 0-based trajectories whose middle was cut for size
    passes: int = 1
    disagreement: float | None = None


@dataclass
class TrajectoryGroup:
    """N trajectories of the same scenario (and role, in a game with several players): the unit the judge ranks
    and GRPO normalises over."""

    scenario: Scenario
    trajectories: list[Trajectory]
    role: str = ""
    errors: list[str] = field(default_factory=list)  # rollouts that raised: recorded, never lost
    skipped: bool = False  # zero reward variance: no gradient, reported
    scoring_error: str | None = None
    # How the judge's provider failed when it was down or limiting beyond its retries ("x answered 503"): the
    # step waits for the judge (training/parking) instead of counting the group as a scoring failure.
    judge_outage: str | None = None
    judge_report: JudgeReport | None = None  # set by a judge scorer; the loop emits it as a JudgeUsage event


@dataclass
class Score:
    """What a scorer returns for one trajectory; `reward` is what training uses (None: not scored, e.g. a group
    of identical trajectories the judge was not asked about; such a group trains nothing)."""

    reward: float | None
    judge_score: float | None = None
    explanation: str = ""
    criteria: dict[str, float] = field(default_factory=dict)


class Scorer(Protocol):
    """Scores one group; returns one Score per trajectory, in the group's order."""

    def __call__(self, group: TrajectoryGroup) -> Awaitable[list[Score]]: ...


async def env_reward_scorer(group: TrajectoryGroup) -> list[Score]:
    """The default scorer: the environment's own verifiable reward."""
    scores = []
    for t in group.trajectories:
        if t.env_reward is None:
            raise ValueError(
                f"trajectory of scenario {t.scenario_id!r} has no env reward; "
                "this environment needs a judge (add a `judge` section to the run config)"
            )
        scores.append(Score(reward=t.env_reward))
    return scores


ReviewHook = Callable[[int, list[TrajectoryGroup]], Awaitable[None]]


class TrainingError(RuntimeError):
    """A failure of the engine with a message that says what to do about it."""


# Episodes with several players: one rollout (an episode) may give several trajectories, one per role the
# policy played (`x` and `o` in self-play, `spymaster` and `guesser` in Codenames), each with its own messages
# and reward. Groups form per (scenario, role), so advantages compare like with like; the loop and the judge see
# ordinary groups. Every side of an episode carries the same `episode` id: the web app links them ("the other
# side of this game").
#
# An environment that plays one part returns a Trajectory (role ""); one that plays several returns a list and
# names its roles in `Environment.roles(options)`, in the order its groups are numbered.
#
# A side that sampled nothing (the game ended before its first turn: X's malformed first move, a spymaster's
# refused first clue) is not a side of that game: it leaves its role's group, so its outcome neither trains nor
# moves the advantages of the sides that played (`sampled_nothing`).

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
