"""Scoring one group: prompt → judge → validated, id-mapped scores, with passes, shuffling, dedup and cache.

`score_group` returns the full record (GroupJudgement); `ruler` is the thin ART-compatible wrapper that
returns only the scores; `score_groups` scores many groups under one concurrency limit.
"""
from __future__ import annotations

import asyncio
import random
import statistics
import time
import weakref
from typing import Any, Callable, Sequence

from pydantic import ValidationError

from judging.cache import JudgeCache, request_key
from judging.errors import JudgeError
from judging.labels import relabel
from judging.prompt import (DEFAULT_RUBRIC, build_messages, canonical, common_prefix_length, reply_model,
                            response_format, sha256)
from judging.types import GroupJudgement, JudgeCall, JudgeOptions, TrajectoryScore
from judging.validate import ReplyProblem, Verdict, parse_reply

Message = dict[str, Any]


class ConcurrencyLimit:
    """At most `limit` judge requests in flight, shared by every group scored with it.

    A plain asyncio.Semaphore is bound to the first event loop that waits on it; a scorer outlives loops
    (tests, the web app's executor), so this keeps one semaphore per running loop.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise JudgeError(f"concurrency must be at least 1, got {limit}")
        self.limit = limit
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._by_loop.get(loop)
        if sem is None:
            sem = self._by_loop[loop] = asyncio.Semaphore(self.limit)
        return sem

    async def __aenter__(self) -> None:
        await self._semaphore().acquire()

    async def __aexit__(self, *exc: Any) -> None:
        self._semaphore().release()


def parse_options(options: dict[str, Any]) -> JudgeOptions:
    try:
        return JudgeOptions.model_validate(options)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise JudgeError(f"invalid judge options: {problems}") from None


def _message(obj: Any) -> Message:
    # ART passes openai Choice objects among the messages; what the judge needs is the message inside.
    if hasattr(obj, "message") and hasattr(obj, "finish_reason"):
        obj = obj.message
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True)
    if isinstance(obj, dict):
        return dict(obj)
    raise JudgeError(f"a trajectory message must be a dict (OpenAI chat format), got {type(obj).__name__}")


def _orders(n: int, passes: int, shuffle: bool, seed_text: str) -> list[list[int]]:
    """One presentation order per pass: shuffled deterministically from (seed, group, pass), and different
    across passes while unseen orders remain, so passes really re-judge in another order."""
    if not shuffle or n == 1:
        return [list(range(n)) for _ in range(passes)]
    rng = random.Random(seed_text)
    orders: list[list[int]] = []
    for _ in range(passes):
        order = list(range(n))
        for _try in range(20):
            rng.shuffle(order)
            if order not in orders:
                break
        orders.append(list(order))
    return orders


async def _judge_pass(*, pass_index: int, order: list[int], distinct: list[list[Message]], model: str,
                      rubric: str, params: dict[str, Any], tools: list[dict[str, Any]] | None,
                      opts: JudgeOptions, cache: JudgeCache | None,
                      limiter: Any) -> tuple[dict[int, Verdict], list[JudgeCall], set[int]]:
    """One pass: its verdicts by distinct index, its calls, and the distinct indices whose middle was cut."""
    from judging.llm import call_judge  # keeps litellm out of `import judging`

    prefix = common_prefix_length(distinct)
    messages, cut = build_messages(rubric=rubric, criteria=opts.criteria, shared=distinct[0][:prefix],
                                   remainders=[distinct[i][prefix:] for i in order], tools=tools,
                                   reference=opts.reference, max_chars=opts.max_prompt_chars)
    truncated = {order[i] for i in cut}
    schema = reply_model(opts.criteria)
    fmt = response_format(schema)
    prompt_hash = request_key(model, params, messages, fmt)
    key = sha256({"request": prompt_hash, "pass": pass_index})  # k passes in one order are k samples
    n = len(order)

    def to_input(verdicts: dict[str, Verdict]) -> dict[int, Verdict]:
        return {order[int(tid) - 1]: v for tid, v in verdicts.items()}  # presentation id → distinct index

    if cache is not None and (hit := cache.get(key)) is not None:
        # Nothing was sent, so nothing was paid: the stored price belongs to the call that filled the cache.
        calls = [JudgeCall.model_validate({**c, "cache_hit": True, "cost_usd": 0.0, "uncached_cost_usd": 0.0})
                 for c in hit["calls"]]
        return to_input({tid: Verdict(**v) for tid, v in hit["verdicts"].items()}), calls, truncated

    convo = list(messages)
    calls: list[JudgeCall] = []
    for attempt in range(1, opts.max_attempts + 1):
        try:
            async with limiter:
                raw = await call_judge(model=model, messages=convo, response_format=fmt, params=params,
                                       transport_retries=opts.transport_retries, backoff_s=opts.backoff_s,
                                       max_backoff_s=opts.max_backoff_s)
        except JudgeError as err:
            err.calls = calls + err.calls  # what was already paid for, for accounting
            raise
        call = JudgeCall(pass_index=pass_index, attempt=attempt, prompt_hash=prompt_hash, order=order,
                         prompt_tokens=raw.prompt_tokens, completion_tokens=raw.completion_tokens,
                         cost_usd=raw.cost_usd, latency_s=raw.latency_s, transport_retries=raw.transport_retries,
                         prefix_tokens=raw.prefix_tokens, counted_tokens=raw.counted_tokens,
                         cached_tokens=raw.cached_tokens, cache_write_tokens=raw.cache_write_tokens,
                         uncached_cost_usd=raw.uncached_cost_usd,
                         raw_reply=raw.content)
        calls.append(call)
        try:
            verdicts = parse_reply(raw.content, n=n, schema=schema, criteria=opts.criteria)
        except ReplyProblem as problem:
            call.rejected = str(problem)
            if attempt == opts.max_attempts:
                raise JudgeError(
                    f"judge {model} gave no usable reply in {attempt} attempt(s) (pass {pass_index + 1}): "
                    f"{problem}. Try a stronger judge model or one that supports structured output.",
                    calls=calls) from None
            # Feed the problem back: the judge sees its own reply and what was wrong with it.
            convo += [{"role": "assistant", "content": raw.content or ""},
                      {"role": "user", "content": f"Your reply was rejected: {problem}. Reply again with the "
                                                  f"complete corrected JSON for all {n} trajectories."}]
            continue
        if cache is not None:
            cache.put(key, {"calls": [c.model_dump() for c in calls],
                            "verdicts": {t: vars(v) for t, v in verdicts.items()}})
        return to_input(verdicts), calls, truncated
    raise AssertionError("unreachable: max_attempts >= 1")


async def _all_or_nothing(coros: list[Any]) -> list[Any]:
    """gather, but the first failure cancels the rest: no judge requests keep running (and costing) for a
    result that will be thrown away."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> None:
        return None


async def score_group(message_lists: Sequence[Sequence[Any]], judge_model: str, *, rubric: str | None = None,
                      extra_litellm_params: dict[str, Any] | None = None, tools: list[dict[str, Any]] | None = None,
                      limiter: ConcurrencyLimit | asyncio.Semaphore | None = None, **options: Any) -> GroupJudgement:
    """Judge one group of trajectories (each a list of OpenAI chat messages) relative to each other."""
    opts = parse_options(options)
    if not message_lists:
        raise JudgeError("no trajectories to judge: the group is empty")
    if opts.labels is not None and len(opts.labels) != len(message_lists):
        raise JudgeError(f"labels: {len(opts.labels)} labels for {len(message_lists)} trajectories")
    lists = [[_message(m) for m in ml] for ml in message_lists]
    rubric_text = rubric.strip() if rubric and rubric.strip() else DEFAULT_RUBRIC
    params = dict(extra_litellm_params or {})
    cache = JudgeCache(opts.cache_dir) if opts.cache else None

    # Identical trajectories are shown once and share one score: cheaper, and consistent by construction.
    slot_of: dict[str, int] = {}
    slots: list[int] = []
    distinct: list[list[Message]] = []
    for ml in lists:
        k = canonical(ml)
        if k not in slot_of:
            slot_of[k] = len(distinct)
            distinct.append(ml)
        slots.append(slot_of[k])

    started = time.perf_counter()
    orders = _orders(len(distinct), opts.passes, opts.shuffle, f"{opts.seed}:{sha256(list(slot_of))}")
    results = await _all_or_nothing([
        _judge_pass(pass_index=p, order=order, distinct=distinct, model=judge_model, rubric=rubric_text,
                    params=params, tools=tools, opts=opts, cache=cache, limiter=limiter or _NoLimit())
        for p, order in enumerate(orders)])
    calls = [c for _, pass_calls, _ in results for c in pass_calls]
    cut = set().union(*(t for _, _, t in results))

    per_slot: list[TrajectoryScore] = []
    spoke: list[int] = []  # per distinct trajectory, the pass whose explanation it keeps
    spreads: list[float] = []
    for d in range(len(distinct)):
        verdicts = [res[d] for res, _, _ in results]
        pass_scores = [v.score for v in verdicts]
        mean = statistics.fmean(pass_scores)
        spreads.append(statistics.pstdev(pass_scores))
        names = verdicts[0].criteria.keys()
        criteria = {name: statistics.fmean(v.criteria[name] for v in verdicts) for name in names}
        # The explanation of the pass that agrees best with the average speaks for the average.
        spoke.append(min(range(len(verdicts)), key=lambda p: abs(pass_scores[p] - mean)))
        per_slot.append(TrajectoryScore(trajectory_id="", score=mean, explanation=verdicts[spoke[-1]].explanation,
                                        criteria=criteria, pass_scores=pass_scores))
    identical = len(distinct) == 1 and len(lists) > 1

    def explanation(i: int, s: int) -> str:
        """Trajectory i's explanation with the judge's numbers (of the pass it came from) turned into the
        caller's labels: its own slot is itself; a slot shown once for identical trajectories names them all."""
        if opts.labels is None:
            return per_slot[s].explanation
        members = {d: "/".join(opts.labels[j] for j, t in enumerate(slots) if t == d) for d in range(len(distinct))}
        names = {p + 1: opts.labels[i] if d == s else members[d] for p, d in enumerate(orders[spoke[s]])}
        return relabel(per_slot[s].explanation, names)

    scores = [per_slot[s].model_copy(update={"trajectory_id": str(i + 1), "absolute": identical,
                                             "explanation": explanation(i, s)})
              for i, s in enumerate(slots)]
    return GroupJudgement(
        scores=scores, judge_model=judge_model, rubric=rubric_text, calls=calls, passes=opts.passes,
        identical=identical, distinct=len(distinct),
        truncated=[str(i + 1) for i, s in enumerate(slots) if s in cut],
        disagreement=statistics.fmean(spreads) if opts.passes > 1 else None,
        cache_hit=all(c.cache_hit for c in calls), latency_s=time.perf_counter() - started)


async def ruler(message_lists: Sequence[Sequence[Any]], judge_model: str = "openai/o3", *,
                rubric: str | None = None, extra_litellm_params: dict[str, Any] | None = None,
                tools: list[dict[str, Any]] | None = None, **options: Any) -> list[TrajectoryScore]:
    """ART-compatible entry point: one TrajectoryScore per input list, in input order.

    `options` are JudgeOptions (passes, shuffle, criteria, cache, cache_dir, max_attempts, ...).
    """
    judgement = await score_group(message_lists, judge_model, rubric=rubric,
                                  extra_litellm_params=extra_litellm_params, tools=tools, **options)
    return judgement.scores


async def score_groups(groups: Sequence[Sequence[Sequence[Any]]], judge_model: str, *, concurrency: int = 4,
                       return_exceptions: bool = False,
                       on_done: Callable[[int, GroupJudgement | JudgeError], None] | None = None,
                       **kwargs: Any) -> list[GroupJudgement | JudgeError]:
    """Score many groups with at most `concurrency` judge requests in flight; results in input order.

    `on_done(index, result)` is called as each group finishes (progress lines). With `return_exceptions`
    a group's JudgeError takes its place in the result instead of aborting the rest.
    """
    limiter = kwargs.pop("limiter", None) or ConcurrencyLimit(concurrency)

    async def one(i: int, lists: Sequence[Sequence[Any]]) -> GroupJudgement | JudgeError:
        try:
            result: GroupJudgement | JudgeError = await score_group(lists, judge_model, limiter=limiter, **kwargs)
        except JudgeError as err:
            if not return_exceptions:
                raise
            result = err
        if on_done is not None:
            on_done(i, result)
        return result

    return await _all_or_nothing([one(i, g) for i, g in enumerate(groups)])
