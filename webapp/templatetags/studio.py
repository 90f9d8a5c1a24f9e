"""Formatting filters. They return plain strings, so Django's autoescaping still applies to LLM output."""
from __future__ import annotations

import json
from typing import Any

from django import template

register = template.Library()


@register.filter
def num(value: Any, digits: int = 3) -> str:
    if value is None or value == "":
        return "—"
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def pretty_json(value: Any) -> str:
    """Tool-call arguments arrive as a JSON string (or malformed text from a model): indent it when it parses."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, TypeError):
            return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def message_text(content: Any) -> str:
    """OpenAI content is a string or a list of parts; show the text parts and name the others."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                parts.append(f"[{part.get('type', 'part') if isinstance(part, dict) else 'part'}]")
        return "\n".join(parts)
    return json.dumps(content, default=str)


@register.filter
def at(mapping: Any, key: Any) -> Any:
    """mapping[key] in a template (e.g. a trajectory's reward view by id); None when absent."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def label(index: Any) -> str:
    """A trajectory's stable label from its rollout index (audit rows keep the index, not the row)."""
    from webapp.models.runs import trajectory_label

    return trajectory_label(int(index))


@register.filter
def user_error(raw: Any) -> Any:
    """An error as people read it: what happened, what to do, the original folded (webapp/user_errors.py)."""
    from webapp.user_errors import user_error as explain

    return explain(raw)


@register.filter
def run_error(run: Any) -> Any:
    """A run's error as people read it; "resumes from its last checkpoint" only for a run that stopped mid-way
    (failed or crashed after at least one step), where Resume does that."""
    from webapp.models import RunStatus
    from webapp.user_errors import user_error as explain

    stopped = run.status in (RunStatus.FAILED, RunStatus.CRASHED) and run.steps_done > 0
    return explain(run.error, resumable=stopped)


LONG_CHARS, LONG_LINES = 500, 10  # a tool call's arguments or result longer than this start collapsed


def _long(text: str) -> bool:
    return len(text) > LONG_CHARS or text.count("\n") >= LONG_LINES


@register.filter
def conversation(messages: Any) -> list[dict[str, Any]]:
    """Messages for a page, each assistant tool call with its result beside it (the `tool` message with the
    same tool_call_id, then not shown again on its own). Plain strings only: the template escapes them."""
    messages = [m for m in (messages or []) if isinstance(m, dict)]
    results = {m["tool_call_id"]: m for m in messages if m.get("role") == "tool" and m.get("tool_call_id")}
    shown: set[str] = set()
    entries = []
    for m in messages:
        if m.get("role") == "tool" and m.get("tool_call_id") in shown:
            continue
        calls = []
        for call in m.get("tool_calls") or []:
            fn = (call.get("function") or {}) if isinstance(call, dict) else {}
            call_id = str(call.get("id") or "") if isinstance(call, dict) else ""
            result = results.get(call_id) if call_id else None
            text = None if result is None else pretty_json(message_text(result.get("content") or ""))
            if result is not None:
                shown.add(call_id)
            arguments = pretty_json(fn.get("arguments") or "")
            calls.append({"id": call_id, "name": str(fn.get("name", "?")), "arguments": arguments,
                          "arguments_long": _long(arguments), "result": text,
                          "result_long": text is not None and _long(text),
                          "is_error": text is not None and text.startswith("error:")})
        entries.append({"m": m, "calls": calls})
    return entries


@register.filter
def tool_calls(messages: Any) -> list[dict[str, Any]]:
    """Every tool call of a conversation, with its result: the group and compare pages' tool-call blocks."""
    return [call for entry in conversation(messages) for call in entry["calls"]]
