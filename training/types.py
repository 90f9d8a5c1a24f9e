"""The records the engine passes around: scenarios, trajectories, groups and scores.

They are plain dataclasses so that the web app and the judge can build and read them without the engine's
heavy imports; `to_dict` gives the JSON that crosses into events and the database.
"""
from __future__ import annotations

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
    episode: str = ""  # shared by every side of one episode (training/episodes.py)

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
