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
