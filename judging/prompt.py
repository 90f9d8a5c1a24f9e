"""The judge prompt for one group, and the reply schema it asks for.

Layout (DESIGN §4): the system message holds the instructions and the rubric; the user message holds what all
trajectories share once (their common leading messages, the tools, a reference answer), then each
trajectory's remaining messages tagged `<trajectory id="N">`. Ids are assigned in presentation order (1..N),
so an id says nothing about input order; the caller maps them back through `order`.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, create_model

from judging.types import Criterion

Message = dict[str, Any]

DEFAULT_RUBRIC = """\
- An answer that achieves what the user asked for scores higher than one that does not, however polished.
- Among answers that achieve it, prefer the one that gets there more directly: fewer wasted steps, no
  padding, no needless tool calls.
- Stating something the conversation does not support (an invented fact, a made-up policy) is a serious
  fault; it outweighs being helpful in tone.
- Give partial credit for real progress towards the goal.
- Make the gaps between scores reflect the gaps in quality: two nearly equal answers get nearly equal scores,
  a much worse answer a much lower one."""

_RELATIVE = """\
You are judging several attempts by an AI agent at the same task. Each attempt is a conversation between the \
agent and a user or environment. Compare the attempts with each other and give each a score from 0 to 1 \
(1 = best possible, 0 = worthless), following the rubric. The scores are used to rank the attempts, so judge \
them relative to each other, but keep the scale meaningful.

Messages that every attempt shares are shown once under <shared_context>; each attempt's own messages follow \
under <trajectory id="...">. The order in which the attempts are shown means nothing."""

_ABSOLUTE = """\
You are judging one attempt by an AI agent at a task. Score it from 0 to 1 (1 = best possible, \
0 = worthless) on the absolute scale the rubric implies.

Messages that set up the task are shown under <shared_context>; the attempt's own messages follow under \
<trajectory id="1">."""


def common_prefix_length(message_lists: Sequence[Sequence[Message]]) -> int:
    """Number of leading messages equal in every list, never the whole of any list (each attempt keeps at
    least its last message, so no trajectory block is empty)."""
    if not message_lists:
        return 0
    limit = min(len(m) for m in message_lists) - 1
    n = 0
    while n < limit and all(m[n] == message_lists[0][n] for m in message_lists[1:]):
        n += 1
    return max(n, 0)


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def sha256(obj: Any) -> str:
    return hashlib.sha256(canonical(obj).encode()).hexdigest()


def _criteria_text(criteria: list[Criterion]) -> str:
    total = sum(c.weight for c in criteria)
    lines = [f"- {c.name} (weight {c.weight / total:.2f}): {c.description or c.name}" for c in criteria]
    return ("Score every attempt on each criterion separately, each from 0 to 1; the total is computed from "
            "them, so do not give one.\nCriteria:\n" + "\n".join(lines))


def system_message(rubric: str, n: int, criteria: list[Criterion] | None) -> str:
    head = _ABSOLUTE if n == 1 else _RELATIVE
    ids = ", ".join(str(i) for i in range(1, n + 1))
    parts = [head, "Rubric:\n" + rubric.strip()]
    if criteria:
        parts.append(_criteria_text(criteria))
    parts.append(f"Reply with JSON only: an object with key \"scores\" holding exactly {n} item(s), one per "
                 f"trajectory id ({ids}), each with `trajectory_id` (string), a short `explanation` and "
                 + ("`criteria`." if criteria else "`score` (a number from 0 to 1)."))
    return "\n\n".join(parts)


def user_message(shared: Sequence[Message], remainders: Sequence[Sequence[Message]],
                 tools: list[dict[str, Any]] | None, reference: str | None) -> str:
    parts = ["<shared_context>\n" + json.dumps(list(shared), ensure_ascii=False, default=str) + "\n</shared_context>"]
    if tools:
        parts.append("<tools>\n" + json.dumps(tools, ensure_ascii=False, default=str) + "\n</tools>")
    if reference:
        parts.append("<reference_answer>\n" + reference + "\n</reference_answer>\n"
                     "(A good answer shown to you only; the agent did not see it.)")
    for i, rest in enumerate(remainders, start=1):
        body = json.dumps(list(rest), ensure_ascii=False, default=str)
        parts.append(f'<trajectory id="{i}">\n{body}\n</trajectory>')
    return "\n\n".join(parts)


def build_messages(*, rubric: str, criteria: list[Criterion] | None, shared: Sequence[Message],
                   remainders: Sequence[Sequence[Message]], tools: list[dict[str, Any]] | None,
                   reference: str | None) -> list[Message]:
    return [
        {"role": "system", "content": system_message(rubric, len(remainders), criteria)},
        {"role": "user", "content": user_message(shared, remainders, tools, reference)},
    ]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Item(_Strict):
    trajectory_id: str
    explanation: str
    score: float = Field(description="From 0 to 1.")


class JudgeReply(_Strict):
    scores: list[_Item]


def reply_model(criteria: list[Criterion] | None) -> type[BaseModel]:
    """The pydantic model of the reply: sent as `response_format` and used to parse the reply.

    With criteria the item carries an object with one required number per criterion instead of `score`
    (strict JSON-schema mode wants every key named and required, so no free-form dict).
    """
    if not criteria:
        return JudgeReply
    fields: dict[str, Any] = {c.name: (float, Field(description=c.description or c.name)) for c in criteria}
    # protected_namespaces=(): a criterion may well be called `model_quality`
    config = ConfigDict(extra="forbid", protected_namespaces=())
    scores_model = create_model("CriterionScores", __config__=config, **fields)
    item = create_model("CriteriaItem", __config__=ConfigDict(extra="forbid"), trajectory_id=(str, ...),
                        explanation=(str, ...), criteria=(scores_model, ...))
    return create_model("JudgeCriteriaReply", __config__=ConfigDict(extra="forbid"), scores=(list[item], ...))
