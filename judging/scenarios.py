"""Scenarios from a task description: an LLM (any litellm model, e.g. the project's judge) drafts N diverse
scenarios (user message, optional reference answer, difficulty). Duplicates are removed here; a person reviews,
edits and accepts the drafts before any run uses them (the web app's scenario generator page).

    result = await draft_scenarios("Answer refund questions for a shoe shop", n=10, model="openai/gpt-4o-mini")
"""
from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judging.errors import JudgeError

MAX_SCENARIOS = 50
DUPLICATE_JACCARD = 0.8  # word-set overlap at which two drafts say the same thing

SYSTEM = ("You write evaluation and training scenarios for an AI agent. Each scenario is one realistic user "
          "message the agent must handle. Make them diverse: different intents, phrasings, lengths, edge cases "
          "and difficulties. Reply with JSON only.")


class DraftScenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_message: str = Field(min_length=1, max_length=4000)
    reference: str | None = Field(None, max_length=4000, description="A good answer, when one can be stated.")
    difficulty: Literal["easy", "medium", "hard"] = "medium"


class _Reply(BaseModel):
    scenarios: list[DraftScenario]


class DraftResult(BaseModel):
    scenarios: list[DraftScenario]
    duplicates_removed: int
    cost_usd: float | None


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def dedupe(drafts: list[DraftScenario]) -> tuple[list[DraftScenario], int]:
    """Keeps the first of drafts whose user messages are the same up to case, punctuation and spacing, or share
    at least DUPLICATE_JACCARD of their words."""
    kept: list[DraftScenario] = []
    seen: list[set[str]] = []
    for d in drafts:
        words = _words(d.user_message)
        if any(words == s or (words | s and len(words & s) / len(words | s) >= DUPLICATE_JACCARD) for s in seen):
            continue
        kept.append(d)
        seen.append(words)
    return kept, len(drafts) - len(kept)


MAX_TOOLS_CHARS = 12_000  # a server with huge schemas still leaves the model room to answer


def tools_text(tools: list[dict[str, Any]]) -> str:
    """An MCP server's tools (OpenAI `tools` format) as the drafting prompt lists them: name, description and
    input schema. The server's text is untrusted: it sits inside <tools>, and tags in it are defused."""
    lines = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        schema = json.dumps(fn.get("parameters") or {}, sort_keys=True, ensure_ascii=False)
        lines.append(f"- {fn.get('name', '?')}: {str(fn.get('description') or '').strip()}\n  input schema: {schema}")
    text = "\n".join(lines)[:MAX_TOOLS_CHARS]
    return re.sub(r"<(/?)(tools|task)\b", r"<\1\2_", text, flags=re.I)


def draft_messages(task: str, n: int, tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    needs_tools = (
        "\n\nThe agent answers by calling these tools of an MCP server:\n<tools>\n"
        f"{tools_text(tools)}\n</tools>\nEvery scenario must be a task the agent can only do by calling at least "
        "one of these tools (looking something up, reading, acting), phrased the way a user of that system would "
        "ask it. Use only what the tools can reach; give the `reference` answer only when the task states "
        "enough to know it.") if tools else ""
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": (
                f"The agent's task:\n<task>\n{task.strip()}\n</task>{needs_tools}\n\nWrite {n} scenarios. For each give "
                "`user_message`, `reference` (a good answer, or null when none can be stated) and `difficulty` "
                '(easy, medium or hard). Reply as {"scenarios": [{"user_message": ..., "reference": ..., '
                '"difficulty": ...}, ...]}.')}]


async def draft_scenarios(task: str, *, n: int, model: str, extra_litellm_params: dict[str, Any] | None = None,
                          transport_retries: int = 2, backoff_s: float = 1.0,
                          tools: list[dict[str, Any]] | None = None) -> DraftResult:
    """Asks `model` for `n` scenarios for `task`; returns them deduplicated (at most n). `tools` (an MCP
    server's, OpenAI format): the scenarios must need them. The reply is untrusted text: it must validate
    against DraftScenario, else JudgeError says what was wrong."""
    from judging.llm import call_judge  # keeps litellm out of `import judging`

    if not task.strip():
        raise JudgeError("describe the task in a sentence or two")
    if not 1 <= n <= MAX_SCENARIOS:
        raise JudgeError(f"ask for 1 to {MAX_SCENARIOS} scenarios, not {n}")
    raw = await call_judge(model=model, messages=draft_messages(task, n, tools), response_format=_Reply,
                           params=dict(extra_litellm_params or {}), transport_retries=transport_retries,
                           backoff_s=backoff_s, max_backoff_s=30.0)
    try:
        reply = _Reply.model_validate(json.loads(raw.content or ""))
    except (json.JSONDecodeError, ValidationError) as err:
        raise JudgeError(f"{model} did not reply with usable scenarios: {str(err)[:300]}") from None
    kept, removed = dedupe(reply.scenarios)
    return DraftResult(scenarios=kept[:n], duplicates_removed=removed, cost_usd=raw.cost_usd)
