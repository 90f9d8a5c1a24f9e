"""Checks a judge reply against the group it judged. Every problem is named, never repaired: a reply with a
score of 7, a missing id or a duplicate is rejected and the problem is fed back to the judge (core.py)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from pydantic import BaseModel, ValidationError

from judging.types import Criterion


class ReplyProblem(Exception):
    """A judge reply we cannot use; the message is written to be shown to the judge itself."""


@dataclass
class Verdict:
    score: float
    explanation: str
    criteria: dict[str, float] = field(default_factory=dict)


# Some local judges wrap JSON in a markdown fence even when asked for JSON; the fence carries no meaning.
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.S)


def parse_reply(content: str | None, *, n: int, schema: type[BaseModel],
                criteria: list[Criterion] | None) -> dict[str, Verdict]:
    """Returns presentation id ("1".."n") → verdict, or raises ReplyProblem listing every problem found."""
    if not content or not content.strip():
        raise ReplyProblem("the reply was empty; reply with the JSON object only")
    m = _FENCE.match(content)
    text = m.group(1) if m else content
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        raise ReplyProblem(f"the reply is not valid JSON ({err.msg} at {where})") from None
    try:
        parsed = schema.model_validate(data)
    except ValidationError as err:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in err.errors()[:8])
        raise ReplyProblem(f"the reply does not match the schema ({details})") from None

    expected = [str(i) for i in range(1, n + 1)]
    problems: list[str] = []
    seen: dict[str, Verdict] = {}
    duplicates: list[str] = []
    unknown: list[str] = []
    for item in parsed.scores:  # type: ignore[attr-defined]
        tid = item.trajectory_id.strip()
        if tid not in expected:
            unknown.append(item.trajectory_id)
            continue
        if tid in seen:
            duplicates.append(tid)
            continue
        if criteria:
            values = item.criteria.model_dump()
            for name, v in values.items():
                if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                    problems.append(f"trajectory {tid}: criterion {name} = {v} is outside 0..1")
            total_w = sum(c.weight for c in criteria)
            score = sum(c.weight * values[c.name] for c in criteria) / total_w
            seen[tid] = Verdict(score, item.explanation, values)
        else:
            if not (math.isfinite(item.score) and 0.0 <= item.score <= 1.0):
                problems.append(f"trajectory {tid}: score {item.score} is outside 0..1")
            seen[tid] = Verdict(item.score, item.explanation)
    got = len(parsed.scores)  # type: ignore[attr-defined]
    if got != n:
        problems.insert(0, f"expected exactly {n} scores (ids {', '.join(expected)}), got {got}")
    missing = [t for t in expected if t not in seen]
    if missing:
        problems.append(f"missing trajectory id(s): {', '.join(missing)}")
    if duplicates:
        problems.append(f"duplicate trajectory id(s): {', '.join(sorted(set(duplicates)))}")
    if unknown:
        problems.append(f"unknown trajectory id(s): {', '.join(repr(u) for u in unknown)}")
    if problems:
        raise ReplyProblem("; ".join(problems))
    return seen
