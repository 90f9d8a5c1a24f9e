"""The judge prompt for one group, and the reply schema it asks for.

Layout (DESIGN §4), ordered for providers' prompt caches: everything that is the same for every call of a run
comes first and the trajectories last. The system message holds the instructions, the rubric, the criteria and
the tools (run-constant; with the reply schema, the request's cacheable prefix). The user message holds what
varies per group: what all its trajectories share once (their common leading messages, a reference answer),
then each trajectory's remaining messages tagged `<trajectory id="N">`, then how many scores to give (N varies
with the group's distinct trajectories, so it stays out of the prefix). Messages are rendered as a plain
transcript (`role: text`, tool calls as `name(args)`), not as JSON: the same roles, calls and content in fewer
tokens. Ids are assigned in presentation order (1..N), so an id says nothing about input order; the caller maps
them back through `order`.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Sequence

from pydantic import BaseModel, BeforeValidator, ConfigDict, create_model

from judging.errors import JudgeError
from judging.types import Criterion

Message = dict[str, Any]

DEFAULT_RUBRIC = """\
- Achieving what the user asked for beats not achieving it, however polished.
- Among answers that achieve it, the more direct one wins: no wasted steps, padding or needless tool calls.
- Stating what the conversation does not support (an invented fact or policy) is a serious fault.
- Real progress towards the goal earns partial credit.
- Score gaps match quality gaps: nearly equal answers get nearly equal scores."""

# Only what the reply schema cannot say: the task, the scale and how to read the transcript. The schema (sent
# as a strict response_format) already names every field and type, so the text never repeats it.
_RELATIVE = """\
Score each attempt by an AI agent at the same task from 0 (worthless) to 1 (best), by the rubric, relative to \
the others. Messages all attempts share are under <context>; each attempt's own follow under its \
<trajectory id>, in no meaningful order."""

_ABSOLUTE = """\
Score the attempt below by an AI agent at a task from 0 (worthless) to 1 (best possible) on the absolute scale \
the rubric implies. Messages that set up the task are under <context>; the attempt's own messages follow."""

TRUNCATION_MARKER = "\n[... {omitted} characters cut from the middle of this attempt ...]\n"
_MIN_TRAJECTORY_CHARS = 400  # below this a cut attempt shows too little of its start and end to be judged

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
    return "Score each criterion separately; the total is computed from them.\nCriteria:\n" + "\n".join(lines)


def system_message(rubric: str, n: int, criteria: list[Criterion] | None,
                   tools: list[dict[str, Any]] | None = None) -> str:
    """The run-constant part: instructions, rubric, criteria, then the tools (last: should a run's groups ever
    carry different tool sets, everything before them is still shared)."""
    head = _ABSOLUTE if n == 1 else _RELATIVE
    parts = [head, "Rubric:\n" + rubric.strip()]
    if criteria:
        parts.append(_criteria_text(criteria))
    if tools:
        parts.append("<tools>\n" + _tools_text(tools) + "\n</tools>")
    return "\n\n".join(parts)


def count_line(n: int) -> str:
    # The schema cannot say how many items or which ids: that one line stays, after the trajectories, because
    # it changes with the group (duplicates are shown once) and would end the shared prefix where it stood.
    ids = "id 1" if n == 1 else f"ids 1-{n}"
    return f"Give exactly {n} score(s), one per trajectory {ids}."


# A trajectory (untrusted text) must not close its own block or open another one.
_TAG = re.compile(r"<(/?)(trajectory|context|tools|reference)\b", re.I)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: the text parts, other parts named
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) and p.get("type") == "text"
                         else f"[{p.get('type', 'part') if isinstance(p, dict) else 'part'}]" for p in content)
    return canonical(content)


def _line(message: Message, call_names: dict[str, str] | None = None) -> str:
    """One message as `role: text`; tool calls as `assistant tool_call: name(args)`, results as
    `tool name: text` (the name from the message, else from the call it answers, by tool_call_id, as the pages
    pair them). Any other field a message carries (a refusal, reasoning) is kept as `key= value`."""
    role = str(message.get("role", "?"))
    name = message.get("name") or (call_names or {}).get(str(message.get("tool_call_id") or ""))
    if role == "tool" and name:
        role = f"tool {name}"
    lines = []
    text = _text(message.get("content"))
    if text or not message.get("tool_calls"):
        lines.append(f"{role}: {text}")
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        lines.append(f"{role} tool_call: {fn.get('name', '?')}({fn.get('arguments', '')})")
    skip = {"role", "content", "tool_calls", "tool_call_id", "name"}
    lines += [f"{role} {k}= {v if isinstance(v, str) else canonical(v)}" for k, v in message.items()
              if k not in skip and v not in (None, "", [], {})]
    return _TAG.sub(r"<\1\2_", "\n".join(lines))


def transcript(messages: Sequence[Message]) -> str:
    """Messages as a plain transcript, one `role: text` entry each: the same roles, tool calls and content as
    their JSON, without the JSON's quoting and key noise."""
    call_names = {str(call["id"]): str((call.get("function") or {}).get("name", "?"))
                  for m in messages for call in (m.get("tool_calls") or [])
                  if isinstance(call, dict) and call.get("id") and isinstance(call.get("function") or {}, dict)}
    return "\n".join(_line(m, call_names) for m in messages)


def _tools_text(tools: list[dict[str, Any]]) -> str:
    lines = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        params = fn.get("parameters")
        line = f"- {fn.get('name', '?')}({canonical(params) if params else ''})"
        lines.append(line + (f": {fn['description']}" if fn.get("description") else ""))
    return "\n".join(lines)


def cut_middle(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters by dropping its middle, with a marker saying how much went."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(TRUNCATION_MARKER) - 8, 2)
    head, tail = keep // 2, keep - keep // 2
    return text[:head] + TRUNCATION_MARKER.format(omitted=len(text) - head - tail) + text[len(text) - tail:]


def _per_trajectory_limit(lengths: list[int], budget: int) -> int | None:
    """The largest per-trajectory length L with sum(min(len, L)) <= budget (short attempts stay whole, the
    long ones share the rest equally); None when nothing needs cutting."""
    if sum(lengths) <= budget:
        return None
    remaining, left = budget, len(lengths)
    for length in sorted(lengths):
        if length * left > remaining:
            return remaining // left
        remaining -= length
        left -= 1
    return None


def user_message(shared: Sequence[Message], remainders: Sequence[Sequence[Message]], reference: str | None,
                 max_chars: int | None = None) -> tuple[str, list[int]]:
    """The user message and the presentation indices (0-based) of the trajectories whose middle was cut to
    keep the message within `max_chars`."""
    head = []
    if shared:
        head.append("<context>\n" + transcript(shared) + "\n</context>")
    if reference:
        head.append("<reference>(seen by you only, not by the agent)\n" + reference + "\n</reference>")
    bodies = [transcript(rest) for rest in remainders]
    tail = count_line(len(bodies))
    cut: list[int] = []
    if max_chars is not None:
        frame = len(tail) + sum(len(h) + 2 for h in head) + sum(len(f'<trajectory id="{i}">\n\n</trajectory>') + 2
                                                   for i in range(1, len(bodies) + 1))
        limit = _per_trajectory_limit([len(b) for b in bodies], max_chars - frame)
        if limit is not None:
            if limit < _MIN_TRAJECTORY_CHARS:
                raise JudgeError(f"the judge prompt cannot fit in max_prompt_chars: beside the instructions, rubric "
                                 f"and tools, {max_chars} characters are left; the shared context and reference take "
                                 f"{frame} of them, leaving {max(limit, 0)} per trajectory; raise max_prompt_chars or "
                                 "shorten the shared context")
            cut = [i for i, b in enumerate(bodies) if len(b) > limit]
            bodies = [cut_middle(b, limit) for b in bodies]
    blocks = [f'<trajectory id="{i}">\n{b}\n</trajectory>' for i, b in enumerate(bodies, start=1)]
    return "\n\n".join(head + blocks + [tail]), cut


def build_messages(*, rubric: str, criteria: list[Criterion] | None, shared: Sequence[Message],
                   remainders: Sequence[Sequence[Message]], tools: list[dict[str, Any]] | None,
                   reference: str | None, max_chars: int | None = None) -> tuple[list[Message], list[int]]:
    """The judge's two messages, and which trajectories (presentation indices) were cut to fit `max_chars`
    (a bound on the whole prompt's characters). The system message is the run-constant prefix."""
    system = system_message(rubric, len(remainders), criteria, tools)
    user, cut = user_message(shared, remainders, reference, None if max_chars is None else max_chars - len(system))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}], cut


def _trajectory_id(value: Any) -> Any:
    # A judge without structured output may write the id as a number: 3 means "3". A bool is not an id.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


# The JSON schema stays {"type": "string"}: the validator only widens what is accepted back.
TrajectoryId = Annotated[str, BeforeValidator(_trajectory_id)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Item(_Strict):
    trajectory_id: TrajectoryId
    explanation: str
    score: float


class JudgeReply(_Strict):
    scores: list[_Item]


def reply_model(criteria: list[Criterion] | None) -> type[BaseModel]:
    """The pydantic model of the reply: used to parse the reply and, through `response_format`, sent as its
    schema.

    With criteria the item carries an object with one required number per criterion instead of `score`
    (strict JSON-schema mode wants every key named and required, so no free-form dict).
    """
    if not criteria:
        return JudgeReply
    fields: dict[str, Any] = {c.name: (float, ...) for c in criteria}
    # protected_namespaces=(): a criterion may well be called `model_quality`
    config = ConfigDict(extra="forbid", protected_namespaces=())
    scores_model = create_model("CriterionScores", __config__=config, **fields)
    item = create_model("CriteriaItem", __config__=ConfigDict(extra="forbid"), trajectory_id=(TrajectoryId, ...),
                        explanation=(str, ...), criteria=(scores_model, ...))
    return create_model("JudgeCriteriaReply", __config__=ConfigDict(extra="forbid"), scores=(list[item], ...))


def _without_titles(node: Any) -> Any:
    # pydantic titles every model and field ("Trajectory Id"); they repeat the key and tell the judge nothing.
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items()
                if not (k == "title" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def response_format(model: type[BaseModel]) -> dict[str, Any]:
    """The strict `response_format` for `model`: its JSON schema without pydantic's titles (criterion
    descriptions are in the system message, so the schema carries names and types only)."""
    schema = _without_titles(model.model_json_schema())
    return {"type": "json_schema", "json_schema": {"name": "scores", "strict": True, "schema": schema}}
