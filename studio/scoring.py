"""The judge as a training-loop scorer: `judge_scorer_from_config(options) -> Scorer`.

The engine loads it by name (entry point `rubric_studio.scorers: judge`) with the `judge` section of a run
config as `options`, e.g.

    "judge": {"judge_model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY", "rubric": "...",
              "combine": "weighted", "judge_weight": 0.7, "env_weight": 0.3}

The env reward stays on the trajectory (`Trajectory.env_reward`, the independent reward); the returned
Score carries the combined reward beside the judge score, explanation and per-criterion scores.
"""
from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

import judging
from judging import ConcurrencyLimit, Criterion, GroupJudgement, JudgeError
from judging.prompt import canonical
from studio.key_budget import KeyBudget
from studio.key_policy import POLICY_ENV, key_policy_refusal, parse_key_policy
from training.types import JudgeReport, Score, TrajectoryGroup, trajectory_label


class JudgeScorerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judge_model: str = Field(min_length=1, description="Any litellm model string, e.g. openai/gpt-4o-mini.")
    api_base: str | None = Field(None, description="Base URL of an OpenAI-compatible judge API (…/v1).")
    api_key_env: str | None = Field(None, description="Name of the env var holding the API key (never the "
                                                       "key itself). Default: the provider's usual variable.")
    rubric: str | None = Field(None, description="The rubric text; default: the built-in rubric.")
    criteria: list[Criterion] | None = Field(None, description="Named weighted criteria.")
    passes: int = Field(1, ge=1, le=16, description="Judge each group k times in different orders, averaged.")
    shuffle: bool = True
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    cache: bool = True
    cache_dir: str | None = Field(None, description="Default: $RUBRIC_STUDIO_JUDGE_CACHE or ~/.cache/...")
    concurrency: int = Field(4, ge=1, description="Judge requests in flight at once, across all groups.")
    max_attempts: int = Field(2, ge=1, le=5)
    transport_retries: int = Field(4, ge=0, le=10, description="Retries of timeouts, 429 and 5xx per request; "
                                   "beyond them the run waits for the judge (parked) instead of failing.")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles per retry (with jitter).")
    timeout_s: float = Field(120.0, gt=0)
    max_prompt_chars: int = Field(200_000, ge=2_000, description="Bound on the judge prompt; longer "
                                  "trajectories lose their middle (marked, and listed in the group's report).")
    combine: Literal["judge", "env", "weighted"] = Field(
        "judge", description="reward = judge score | env reward | judge_weight*judge + env_weight*env.")
    judge_weight: float = Field(0.5, ge=0.0)
    env_weight: float = Field(0.5, ge=0.0)

    @model_validator(mode="after")
    def _weights_used(self) -> "JudgeScorerOptions":
        if self.combine == "weighted" and self.judge_weight + self.env_weight == 0:
            raise ValueError("combine 'weighted' needs judge_weight + env_weight > 0")
        return self


def judge_litellm_params(options: JudgeScorerOptions, *, api_key: str | None = None) -> dict[str, Any]:
    """The litellm parameters of a judge request: the one place they are built, for training and the
    playground alike. Every set value is sent, 0 included (a temperature of 0.0 is a choice, not "unset").
    `api_key` is a key given directly (the playground's stored key); otherwise `api_key_env` names it."""
    params: dict[str, Any] = {"timeout": options.timeout_s}
    if options.api_base:
        params["api_base"] = options.api_base
    if api_key:
        params["api_key"] = api_key
    elif options.api_key_env:
        policy = os.environ.get(POLICY_ENV)  # set by the web app's worker; absent when run on its own
        refusal = policy is not None and key_policy_refusal(parse_key_policy(policy), api_key_env=options.api_key_env,
                                                            api_base=options.api_base)
        if refusal:
            raise JudgeError(f"judge.api_key_env: {refusal}")
        key = os.environ.get(options.api_key_env)
        if not key:
            raise JudgeError(f"judge.api_key_env names {options.api_key_env!r}, but that environment variable "
                             "is not set")
        params["api_key"] = key
    elif options.api_base and os.environ.get(POLICY_ENV) is not None:
        # Without a named key litellm would send the provider's usual variable (OPENAI_API_KEY, …) to this
        # endpoint, past the policy: an endpoint with no key named gets no key.
        params["api_key"] = "none"
    if options.temperature is not None:
        params["temperature"] = options.temperature
    return params


def judge_report(judgement: GroupJudgement | None, *, judge_model: str, calls: list[Any] | None = None,
                 identical: bool = False) -> JudgeReport:
    """The engine's record of what judging a group cost; only requests really sent count towards tokens and
    cost, cache hits are counted apart."""
    calls = list(judgement.calls if judgement is not None else calls or [])
    fresh = [c for c in calls if not c.cache_hit]
    costs = [c.cost_usd for c in fresh]
    return JudgeReport(
        judge_model=judge_model, calls=[{**c.model_dump(mode="json"), "judge_model": judge_model} for c in calls],
        requests=len(fresh), cache_hits=len(calls) - len(fresh),
        prompt_tokens=sum(c.prompt_tokens or 0 for c in fresh),
        completion_tokens=sum(c.completion_tokens or 0 for c in fresh),
        cost_usd=None if any(c is None for c in costs) else float(sum(costs)),  # type: ignore[arg-type]
        identical=identical, truncated=[int(t) - 1 for t in judgement.truncated] if judgement is not None else [],
        passes=judgement.passes if judgement is not None else 1,
        disagreement=judgement.disagreement if judgement is not None else None)


class JudgeScorer:
    """Scores one TrajectoryGroup with the judge; see the module docstring.

    Each group gets its JudgeReport (calls, tokens, cost, cache hits) in `group.judge_report`, also when the
    judge failed (the failed attempts were paid for); the loop emits it as a JudgeUsage event. A group whose
    trajectories are all identical is not sent: it has nothing to rank and trains nothing.
    """

    def __init__(self, options: JudgeScorerOptions, *, api_key: str | None = None,
                 budget: KeyBudget | None = None) -> None:
        self.options = options
        # The run's own `concurrency`, within its key's budget shared with every other run on that key (if the
        # deployment set one, studio/key_budget).
        own = ConcurrencyLimit(options.concurrency)
        self.limiter = budget.limiter(options.api_key_env, own=own) if budget is not None else own
        self._api_key = api_key
        self._litellm_params()  # a missing key env var fails now, not after the first rollouts

    def _litellm_params(self) -> dict[str, Any]:
        return judge_litellm_params(self.options, api_key=self._api_key)

    def _combine(self, judge_score: float, env: float | None, where: str) -> float:
        o = self.options
        if o.combine == "judge":
            return judge_score
        if env is None:
            raise JudgeError(f"combine {o.combine!r} needs an env reward, but {where} has none; "
                             "use combine 'judge' for this environment")
        if o.combine == "env":
            return env
        return (o.judge_weight * judge_score + o.env_weight * env) / (o.judge_weight + o.env_weight)

    def request(self, group: TrajectoryGroup, *,
                labels: list[str] | None = None) -> tuple[list[list[Any]], dict[str, Any]]:
        """The one judge request builder (training and the playground): the message lists and every keyword
        argument of `judging.score_group`. `labels`: the trajectories' names on the pages (default: letters by
        position in the group, as the web app stores them); the explanations come back in those names."""
        o = self.options
        # Tools are shown once per group; should attempts carry different sets, the judge sees every tool
        # any of them had rather than one attempt's set passed off as everyone's.
        tools_by_key = {canonical(tool): tool for t in group.trajectories for tool in (t.tools or [])}
        return [t.messages for t in group.trajectories], {
            "judge_model": o.judge_model, "rubric": o.rubric, "extra_litellm_params": self._litellm_params(),
            "tools": list(tools_by_key.values()) or None, "limiter": self.limiter, "criteria": o.criteria,
            "passes": o.passes, "shuffle": o.shuffle, "cache": o.cache, "cache_dir": o.cache_dir,
            "max_attempts": o.max_attempts, "max_prompt_chars": o.max_prompt_chars,
            "transport_retries": o.transport_retries, "backoff_s": o.backoff_s,
            "reference": group.scenario.reference,
            "labels": labels or [trajectory_label(i) for i in range(len(group.trajectories))]}

    async def __call__(self, group: TrajectoryGroup, *, labels: list[str] | None = None) -> list[Score]:
        o = self.options
        trajectories = group.trajectories
        if len(trajectories) > 1 and len({canonical(t.messages) for t in trajectories}) == 1:
            group.judge_report = judge_report(None, judge_model=o.judge_model, identical=True)
            return [Score(reward=None, explanation="identical to every other attempt of the group: not judged")
                    for _ in trajectories]
        message_lists, kwargs = self.request(group, labels=labels)
        try:
            judgement = await judging.score_group(message_lists, **kwargs)
        except JudgeError as err:
            group.judge_report = judge_report(None, judge_model=o.judge_model, calls=err.calls)
            raise
        group.judge_report = judge_report(judgement, judge_model=o.judge_model)
        return [
            Score(reward=self._combine(s.score, t.env_reward, f"trajectory {i + 1} of {group.scenario.id!r}"),
                  judge_score=s.score, explanation=s.explanation, criteria=dict(s.criteria))
            for i, (t, s) in enumerate(zip(trajectories, judgement.scores))
        ]


def judge_scorer_from_config(options: dict[str, Any], *, api_key: str | None = None,
                             budget: KeyBudget | None = None) -> JudgeScorer:
    """Entry point `rubric_studio.scorers: judge`: validate the run config's judge section, build a scorer.
    `budget`: the deployment's shared key budgets (studio.key_budget), which its requests keep to."""
    try:
        parsed = JudgeScorerOptions.model_validate(options)
    except ValidationError as err:
        problems = "; ".join(f"judge.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise JudgeError(f"invalid judge config: {problems}") from None
    return JudgeScorer(parsed, api_key=api_key, budget=budget)
