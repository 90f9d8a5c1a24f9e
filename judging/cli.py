"""Rubric iteration from a terminal: score groups from a JSONL file and print scores and explanations.

    python -m judging score GROUPS.jsonl --judge-model openai/gpt-4o-mini [--rubric RUBRIC.md]
        [--api-base URL] [--api-key-env NAME] [--passes K] [--criteria CRITERIA.json] [--json]

GROUPS.jsonl holds one group per line:
    {"id": "refund-1", "trajectories": [[{"role": "user", "content": "..."}, ...], ...],
     "tools": [...optional...], "reference": "...optional..."}
A trajectory may also be {"id": "a", "messages": [...]}, to show its own name in the output, and may carry the
"review" a run recorded (the web app's export: judge score, explanation, human score and its audit, effective
reward, rank), shown beside the new score; a group may carry its "review" (step, means).
Results go to stdout (text, or one JSON object per group with --json); progress goes to stderr.

    python -m judging check GROUPS.jsonl --judge-model M [--passes K] [--shuffles S] [--json]

The judge check (judging/bias.py): rank flips between the stored and the reversed order, with 1 pass and with
K passes; self-consistency across S shuffled orders; length bias. The cache is not used.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judging.core import ConcurrencyLimit, score_group
from judging.errors import JudgeError
from judging.types import Criterion, GroupJudgement, prompt_cache_summary


class StoredOverride(BaseModel):
    """One human change of a trajectory's score, as the web app audited it."""

    model_config = ConfigDict(extra="forbid")
    kind: str = Field(description="score, reorder or clear")
    before: float | None = None
    after: float | None = Field(None, description="The human score after the change (None: removed).")
    reason: str
    user: str | None = None
    at: str = Field(description="When, ISO 8601.")
    applies_to_training: bool = Field(description="Made before the step trained, so it changed its rewards.")


class StoredReview(BaseModel):
    """What a run recorded about one trajectory (the web app's export): carried along, not used for scoring."""

    model_config = ConfigDict(extra="forbid")
    rank: int | None = Field(None, description="1 = best effective reward in its group.")
    judge_score: float | None = None
    explanation: str = Field("", description="The judge's explanation, naming trajectories by their ids.")
    criteria: dict[str, float] = Field(default_factory=dict)
    env_reward: float | None = None
    human_score: float | None = None
    reward: float | None = Field(None, description="The effective reward: the human score, else the scored one.")
    trained_reward: float | None = Field(None, description="The reward the step trained on (None: not yet).")
    advantage: float | None = None
    overrides: list[StoredOverride] = Field(default_factory=list)
    role: str = Field("", description="The part it played in a game with several players ('x', 'spymaster').")
    episode: str = Field("", description="Its game: the trajectories of the same episode are its other sides.")


class StoredGroupReview(BaseModel):
    """Where a group came from in a run, and its means (the web app's export)."""

    model_config = ConfigDict(extra="forbid")
    step: int
    group: int = Field(description="1-based, as the pages number groups.")
    scenario_id: str = ""
    reward_mean: float | None = Field(None, description="Mean of the effective rewards.")
    reward_std: float | None = None
    judge_mean: float | None = None
    skipped: bool = False
    scoring_error: str = ""
    role: str = Field("", description="The part its trajectories played in a game (groups form per role).")


class _Traj(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    messages: list[dict[str, Any]]
    review: StoredReview | None = None


class GroupLine(BaseModel):
    """One line of GROUPS.jsonl."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    trajectories: list[list[dict[str, Any]] | _Traj] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    reference: str | None = None
    review: StoredGroupReview | None = None

    def message_lists(self) -> list[list[dict[str, Any]]]:
        return [t.messages if isinstance(t, _Traj) else t for t in self.trajectories]

    def names(self) -> list[str]:
        return [(t.id if isinstance(t, _Traj) and t.id else f"#{i + 1}") for i, t in enumerate(self.trajectories)]

    def stored(self) -> list[StoredReview | None]:
        return [t.review if isinstance(t, _Traj) else None for t in self.trajectories]


def read_groups(path: Path) -> list[GroupLine]:
    groups = []
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise JudgeError(f"cannot read {path}: {err.strerror}") from None
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            g = GroupLine.model_validate_json(line)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            raise JudgeError(f"{path}:{no}: {where}: {first['msg']} (expected "
                             '{"id": ..., "trajectories": [[messages...], ...]})') from None
        groups.append(g.model_copy(update={"id": g.id or f"line{no}"}))
    if not groups:
        raise JudgeError(f"{path} holds no groups")
    return groups


def _cache_text(acct: dict[str, Any]) -> str:
    """The prompt-caching part of a header: the cacheable share, what the provider served from its cache, and
    the cost at the full input price where caching changed it."""
    if acct["cacheable_share"] is None:
        return ""
    text = f", cacheable prefix {acct['cacheable_share']:.0%}, provider-cached {acct['cached_tokens']} tokens"
    if acct["cache_write_tokens"]:
        text += f", {acct['cache_write_tokens']} written to the cache"
    if acct["uncached_cost_usd"] is not None and acct["cost_usd"] is not None and (
            acct["cached_tokens"] or acct["cache_write_tokens"]):
        text += f" (${acct['uncached_cost_usd']:.4f} at the plain input price)"
    return text


def _format(group: GroupLine, j: GroupJudgement) -> str:
    acct = j.summary()
    cost = "unknown" if acct["cost_usd"] is None else f"${acct['cost_usd']:.4f}"
    head = (f"== {group.id}: {len(j.scores)} trajectories, {acct['requests']} request(s), "
            f"tokens {acct['prompt_tokens']}+{acct['completion_tokens']}, cost {cost}"
            + _cache_text(acct) + (", cached" if j.cache_hit else "") + (", all identical" if j.identical else "")
            + (f", disagreement {j.disagreement:.3f}" if j.disagreement is not None else ""))
    names, stored = group.names(), group.stored()
    ranked = sorted(range(len(j.scores)), key=lambda i: -j.scores[i].score)
    lines = [head]
    for i in ranked:
        s, was = j.scores[i], stored[i]
        crit = ("  [" + ", ".join(f"{k} {v:.2f}" for k, v in s.criteria.items()) + "]") if s.criteria else ""
        before = ("" if was is None or was.reward is None else f"  (stored reward {was.reward:.3f}"
                  + (f", human {was.human_score:.3f}" if was.human_score is not None else "") + ")")
        lines.append(f"  {names[i]:>6}  {s.score:.3f}{crit}{before}  {s.explanation}")
    return "\n".join(lines)


def _judge_params(args: argparse.Namespace) -> dict[str, Any]:
    """litellm params from --api-base and --api-key-env (the key is read from that variable, never argv)."""
    params: dict[str, Any] = {}
    if args.api_base:
        params["api_base"] = args.api_base
    if args.api_key_env:
        if not os.environ.get(args.api_key_env):
            raise JudgeError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
        params["api_key"] = os.environ[args.api_key_env]
    return params


async def _score_all(args: argparse.Namespace) -> int:
    groups = read_groups(Path(args.groups))
    try:
        rubric = Path(args.rubric).read_text() if args.rubric else None
        criteria = ([Criterion.model_validate(c) for c in json.loads(Path(args.criteria).read_text())]
                    if args.criteria else None)
    except (OSError, ValueError) as err:  # ValidationError and JSONDecodeError are ValueErrors
        raise JudgeError(f"cannot use --rubric/--criteria: {err}") from None
    params = _judge_params(args)
    if args.temperature is not None:
        params["temperature"] = args.temperature
    options: dict[str, Any] = {"passes": args.passes, "shuffle": not args.no_shuffle, "cache": not args.no_cache}
    if args.cache_dir:
        options["cache_dir"] = args.cache_dir
    if criteria:
        options["criteria"] = criteria
    limiter = ConcurrencyLimit(args.concurrency)
    started, done, failed = time.monotonic(), 0, 0

    async def one(g: GroupLine) -> tuple[GroupLine, GroupJudgement | JudgeError]:
        nonlocal done, failed
        try:
            res: GroupJudgement | JudgeError = await score_group(
                g.message_lists(), args.judge_model, rubric=rubric, extra_litellm_params=params, tools=g.tools,
                limiter=limiter, reference=g.reference, labels=g.names(), **options)
        except JudgeError as err:
            res, failed = err, failed + 1
        done += 1
        elapsed = time.monotonic() - started
        eta = elapsed / done * (len(groups) - done)
        print(f"\rscored {done}/{len(groups)} groups, {failed} failed, {elapsed:.1f}s elapsed, ETA {eta:.1f}s",
              end="" if done < len(groups) else "\n", file=sys.stderr, flush=True)
        return g, res

    results = await asyncio.gather(*[one(g) for g in groups])
    for g, res in results:  # printed in file order, whatever order they finished in
        if isinstance(res, JudgeError):
            print(json.dumps({"id": g.id, "error": str(res)}) if args.json else f"== {g.id}: FAILED: {res}")
        elif args.json:
            print(json.dumps({"id": g.id, **res.model_dump(), **res.summary()}))
        else:
            print(_format(g, res))
    judged = [res for _, res in results if not isinstance(res, JudgeError)]
    if not args.json and len(judged) > 1:
        print(_total(judged))
    return 1 if failed else 0


def _total(judged: list[GroupJudgement]) -> str:
    """The whole file's judge bill: requests, tokens and cost really paid, and the prompt caching over them."""
    calls = [c for j in judged for c in j.calls if not c.cache_hit]
    costs = [c.cost_usd for c in calls]
    paid = None if None in costs else float(sum(costs))  # type: ignore[arg-type]
    acct = {"cost_usd": paid, **prompt_cache_summary(calls)}
    tokens = f"{sum(c.prompt_tokens or 0 for c in calls)}+{sum(c.completion_tokens or 0 for c in calls)}"
    return (f"== total: {len(judged)} groups, {len(calls)} request(s), tokens {tokens}, cost "
            + ("unknown" if paid is None else f"${paid:.4f}") + _cache_text(acct))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m judging", description="Rubric Studio's judge.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="score the groups of a JSONL file and print scores and explanations")
    c = sub.add_parser("check", help="judge check: position bias (rank flips), self-consistency, length bias")
    for command in (s, c):  # what both read: the groups, and which judge with which rubric
        command.add_argument("groups", help="JSONL file, one group per line (see docs/judging.md)")
        command.add_argument("--judge-model", required=True, help="any litellm model string, e.g. openai/gpt-4o-mini")
        command.add_argument("--rubric", help="a text file with the rubric (default: the built-in rubric)")
        command.add_argument("--api-base", help="base URL of an OpenAI-compatible judge API (…/v1)")
        command.add_argument("--api-key-env", help="name of the environment variable holding the API key")
    s.add_argument("--criteria", help='JSON file: [{"name": ..., "description": ..., "weight": ...}, ...]')
    s.add_argument("--temperature", type=float)
    s.add_argument("--passes", type=int, default=1, help="judge each group k times in different orders")
    s.add_argument("--no-shuffle", action="store_true", help="present trajectories in file order")
    s.add_argument("--no-cache", action="store_true", help="always ask the judge, ignoring the disk cache")
    s.add_argument("--cache-dir", help="judge cache directory (default $RUBRIC_STUDIO_JUDGE_CACHE or ~/.cache)")
    s.add_argument("--concurrency", type=int, default=4, help="judge requests in flight at once")
    s.add_argument("--json", action="store_true", help="one JSON object per group instead of text")
    c.add_argument("--passes", type=int, default=3, help="passes of the multi-pass scoring compared (default 3)")
    c.add_argument("--shuffles", type=int, default=2, help="extra shuffled orders for self-consistency")
    c.add_argument("--json", action="store_true", help="the report as one JSON object")
    return p


async def _check(args: argparse.Namespace) -> int:
    from judging.bias import format_report, judge_check

    groups = read_groups(Path(args.groups))
    params = ({"api_key": "unused"} if args.api_base else {}) | _judge_params(args)
    rubric = Path(args.rubric).read_text() if args.rubric else None
    report = await judge_check([g.message_lists() for g in groups], args.judge_model, passes=args.passes,
                               shuffles=args.shuffles, rubric=rubric, extra_litellm_params=params)
    print(report.model_dump_json() if args.json else format_report(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "check":
            return asyncio.run(_check(args))
        return asyncio.run(_score_all(args))
    except JudgeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
