"""The judge's records: options in, scores and per-call accounting out. Pydantic so they cross into JSON
(web app, cache, CLI) without hand-written converters; `extra="forbid"` so a misspelt option is an error."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Criterion(_Strict):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$",
                      description="Identifier used as a JSON key in the judge's reply, e.g. `faithfulness`.")
    description: str = Field("", description="What the judge should look for under this criterion.")
    weight: float = Field(1.0, gt=0, description="Relative weight in the total; weights are normalised.")


class JudgeOptions(_Strict):
    """Everything `ruler(**options)` / `score_group(**options)` accepts besides model, rubric and params."""

    passes: int = Field(1, ge=1, le=16, description="Judge the group k times in different orders and average.")
    shuffle: bool = Field(True, description="Shuffle the presentation order per pass (position bias).")
    seed: int = Field(0, description="Varies the shuffle; the order is a function of (seed, group, pass), so a "
                                     "rerun shows the judge the same prompt and hits the cache.")
    criteria: list[Criterion] | None = Field(None, description="Named weighted criteria; the total is the "
                                                                "weighted mean of the per-criterion scores.")
    cache: bool = Field(True, description="Reuse replies stored on disk for an identical request.")
    cache_dir: str | None = Field(None, description="Default: $RUBRIC_STUDIO_JUDGE_CACHE, else the user cache "
                                                    "dir (~/.cache/rubric-studio/judge).")
    max_attempts: int = Field(2, ge=1, le=5, description="Judge replies tried per pass; each rejected reply is "
                                                          "fed back with the problem before the next try.")
    transport_retries: int = Field(4, ge=0, le=10, description="Retries of timeouts, 429 and 5xx per request.")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles per retry (with jitter).")
    max_backoff_s: float = Field(30.0, ge=0)
    reference: str | None = Field(None, description="A reference answer shown to the judge only.")
    max_prompt_chars: int = Field(
        200_000, ge=2_000, description="Bound on the judge prompt's characters (about 50k tokens by default, "
        "inside every current judge's context). Over it, the longest trajectories lose their middle, marked, "
        "so that their start and end are still judged; the group's record lists them in `truncated`.")

    @field_validator("criteria")
    @classmethod
    def _unique_names(cls, v: list[Criterion] | None) -> list[Criterion] | None:
        names = [c.name for c in v or []]
        if len(set(names)) != len(names):
            raise ValueError(f"criterion names must be unique, got {names}")
        if v is not None and not v:
            raise ValueError("give at least one criterion, or leave criteria out")
        return v
    labels: list[str] | None = Field(None, description="The trajectories' names as people know them, in input "
                                     "order (e.g. A, B, C). Given, an explanation's mentions of the judge's own "
                                     "numbers (\"Attempt 3\", shuffled per pass) are rewritten to these names.")
    debug: bool = Field(False, description="Accepted for compatibility with ART's ruler; replies are always "
                                           "kept in `JudgeCall.raw_reply`.")


class TrajectoryScore(_Strict):
    trajectory_id: str = Field(description="1-based position of the trajectory in the input.")
    score: float = Field(ge=0.0, le=1.0)
    explanation: str
    criteria: dict[str, float] = Field(default_factory=dict)
    pass_scores: list[float] = Field(default_factory=list, description="One score per pass (before averaging).")
    absolute: bool = Field(False, description="Every trajectory of the group was identical: nothing to rank, so "
                                              "this is one absolute score copied to all (`ruler` callers see it here).")


class JudgeCall(_Strict):
    """One request to the judge API (or its cached copy): what the web app stores as a JudgeCall row."""

    pass_index: int
    attempt: int = Field(description="1 for the first reply of a pass, 2+ for corrective retries.")
    prompt_hash: str = Field(description="sha256 of the request (model, params, messages, schema).")
    order: list[int] = Field(description="Input indices (0-based) in the order the judge saw them.")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = Field(None, description="None when the model has no known price; 0 for a cache hit "
                                                      "(nothing was sent, nothing paid).")
    latency_s: float
    transport_retries: int = 0
    prefix_tokens: int | None = Field(None, description="Tokens of the request's run-constant prefix (reply schema "
                                      "+ system message: instructions, rubric, criteria, tools), counted locally "
                                      "with litellm's tokenizer for the judge model; what a prompt cache can serve.")
    counted_tokens: int | None = Field(None, description="The whole request counted the same way (schema + every "
                                       "message): `prefix_tokens / counted_tokens` is the cacheable share.")
    cached_tokens: int | None = Field(None, description="Prompt tokens the provider reported as read from its prompt "
                                      "cache (billed at the cached-token price); None when it reported nothing.")
    cache_write_tokens: int | None = Field(None, description="Prompt tokens the provider reported as written to its "
                                           "prompt cache (Anthropic bills them above the input price); None when it "
                                           "reported nothing.")
    uncached_cost_usd: float | None = Field(None, description="What the call would have cost with every prompt "
                                            "token at the full input price (no cache-read discount, no cache-write "
                                            "premium); equals `cost_usd` when the cache was neither read nor written.")
    raw_reply: str | None = None
    rejected: str | None = Field(None, description="Why this reply was rejected (a corrective retry followed).")
    cache_hit: bool = False


class GroupJudgement(_Strict):
    scores: list[TrajectoryScore] = Field(description="One per input trajectory, in input order.")
    judge_model: str
    rubric: str
    calls: list[JudgeCall] = Field(default_factory=list)
    passes: int = 1
    identical: bool = Field(False, description="All trajectories were identical: one absolute score, copied.")
    distinct: int = Field(description="How many different trajectories the judge was shown (duplicates share "
                                      "one score).")
    disagreement: float | None = Field(None, description="Mean over trajectories of the std of their scores "
                                                          "across passes; None with one pass.")
    truncated: list[str] = Field(default_factory=list, description="Input ids (1-based) of the trajectories "
                                                                    "whose middle was cut to bound the prompt.")
    cache_hit: bool = Field(False, description="Every call came from the cache: nothing was sent.")
    latency_s: float = 0.0

    def _fresh(self) -> list[JudgeCall]:
        return [c for c in self.calls if not c.cache_hit]

    @property
    def prompt_tokens(self) -> int | None:
        """Tokens paid by this invocation (cache hits are free); None when the API did not report them."""
        vals = [c.prompt_tokens for c in self._fresh()]
        return None if any(v is None for v in vals) else sum(vals)  # type: ignore[arg-type]

    @property
    def completion_tokens(self) -> int | None:
        vals = [c.completion_tokens for c in self._fresh()]
        return None if any(v is None for v in vals) else sum(vals)  # type: ignore[arg-type]

    @property
    def cost_usd(self) -> float | None:
        """Dollars paid by this invocation; None when any request's price is unknown (an unknown is not 0)."""
        vals = [c.cost_usd for c in self._fresh()]
        return None if any(v is None for v in vals) else float(sum(vals))  # type: ignore[arg-type]

    def summary(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cost_usd": self.cost_usd, "requests": len(self._fresh()), "cache_hit": self.cache_hit,
                **prompt_cache_summary(self._fresh())}


def prompt_cache_summary(calls: list[JudgeCall]) -> dict[str, Any]:
    """Prompt caching over requests really sent: the share of their (locally counted) tokens that is the
    run-constant prefix, the prompt tokens the provider served from its cache, and the price without that
    discount (None when any call's price is unknown: a partial sum would read as a saving)."""
    counted = [c for c in calls if c.prefix_tokens is not None and c.counted_tokens]
    prefix, total = sum(c.prefix_tokens or 0 for c in counted), sum(c.counted_tokens or 0 for c in counted)
    uncached = [c.uncached_cost_usd for c in calls]
    return {"cacheable_share": prefix / total if total else None,
            "cached_tokens": sum(c.cached_tokens or 0 for c in calls),
            "cache_write_tokens": sum(c.cache_write_tokens or 0 for c in calls),
            "uncached_cost_usd": None if not calls or None in uncached else sum(u or 0.0 for u in uncached)}
