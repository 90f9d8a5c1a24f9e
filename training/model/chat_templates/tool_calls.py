"""Each family's tool-call text: parsed out of what a model wrote, and rendered as the model writes it.

The formats are vLLM's tool-call parsers of the same names, so the local server answers a request as
`vllm serve --tool-call-parser <format>` does (the facts of each format are in docs/engine.md):
- `hermes` (Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` blocks; the text
  before the first block is the content.
- `llama3_json` (Llama 3.x): JSON objects `{"name": ..., "parameters": {...}}` ("arguments" also accepted),
  several separated by `;`, optionally after `<|python_tag|>`; a call leaves no content.
- `mistral` (Mistral): `[TOOL_CALLS]` and a JSON list of `{"name", "arguments"}` (with a 9-character id); the
  text before the marker is the content.
- `pythonic` (Gemma 3): the whole answer is a Python list of calls, `[name(arg=value), ...]`.

`parse` returns (content, calls) with each call's arguments as a JSON string, as the OpenAI API carries them;
text that is not a well-formed call stays content, as the model wrote it.
"""
from __future__ import annotations

import ast
import json
import re
import uuid
from typing import Any

FORMATS = ("hermes", "llama3_json", "mistral", "pythonic")
Call = dict[str, Any]  # {"name": str, "arguments": str (JSON) or dict}

_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_LLAMA_JSON = re.compile(r"{[^{}]*(?:{[^{}]*}[^{}]*)*}(?:\s*;\s*{[^{}]*(?:{[^{}]*}[^{}]*)*})*", re.DOTALL)
_MISTRAL_LIST = re.compile(r"\[{.*}\]", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"
TOOL_CALLS = "[TOOL_CALLS]"


def _arguments(value: Any) -> dict:
    return json.loads(value) if isinstance(value, str) else dict(value or {})


def _call(name: Any, arguments: Any, call_id: str | None = None) -> Call:
    call: Call = {"name": str(name), "arguments": json.dumps(arguments if arguments is not None else {},
                                                             ensure_ascii=False)}
    if call_id:
        call["id"] = call_id
    return call


def parse(fmt: str, text: str) -> tuple[str | None, list[Call]]:
    """(content, calls) of a model's answer in format `fmt`; no calls: the whole text is the content."""
    try:
        content, calls = _PARSERS[fmt](text)
    except (ValueError, KeyError, TypeError, AttributeError, SyntaxError, RecursionError, IndexError):
        return text, []  # not a well-formed call (a deeply nested one included): the model's text, as written
    return (content, calls) if calls else (text, [])


def _parse_hermes(text: str) -> tuple[str | None, list[Call]]:
    if "<tool_call>" not in text:
        return text, []
    calls = []
    for closed, unclosed in _HERMES.findall(text):
        parsed = json.loads(closed or unclosed)
        calls.append(_call(parsed["name"], parsed.get("arguments", {})))
    content = text[: text.index("<tool_call>")]
    return content or None, calls


def _parse_llama3_json(text: str) -> tuple[str | None, list[Call]]:
    if PYTHON_TAG not in text and "{" not in text:
        return text, []
    match = _LLAMA_JSON.search(text)
    if not match:
        return text, []
    calls = []
    for part in (p.strip() for p in match.group(0).split(";")):
        if part:
            parsed = json.loads(part)
            calls.append(_call(parsed["name"], parsed["arguments"] if "arguments" in parsed else
                               parsed["parameters"]))
    return None, calls


def _parse_mistral(text: str) -> tuple[str | None, list[Call]]:
    if TOOL_CALLS not in text:
        return text, []
    content, rest = text.split(TOOL_CALLS, 1)
    listed = json.loads(_MISTRAL_LIST.findall(rest)[0])
    calls = []
    for item in listed:
        given = item.get("id")
        call_id = given if isinstance(given, str) and len(given) == 9 and given.isalnum() else \
            uuid.uuid4().hex[:9]
        calls.append(_call(item["name"], item.get("arguments", {}), call_id))
    return content or None, calls


def _parse_pythonic(text: str) -> tuple[str | None, list[Call]]:
    tree = ast.parse(text.strip(), mode="eval").body
    if not isinstance(tree, ast.List) or not tree.elts:
        return text, []
    calls = []
    for element in tree.elts:
        if not isinstance(element, ast.Call) or not isinstance(element.func, ast.Name) or element.args:
            return text, []
        calls.append(_call(element.func.id, {k.arg: ast.literal_eval(k.value) for k in element.keywords}))
    return None, calls


_PARSERS = {"hermes": _parse_hermes, "llama3_json": _parse_llama3_json, "mistral": _parse_mistral,
            "pythonic": _parse_pythonic}


def render(fmt: str, calls: list[Call]) -> str:
    """The text a model of format `fmt` writes for `calls` (what its template renders for them)."""
    if fmt == "hermes":
        return "\n".join('<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
                         % (c["name"], json.dumps(_arguments(c["arguments"]), ensure_ascii=False)) for c in calls)
    if fmt == "llama3_json":
        return "; ".join(json.dumps({"name": c["name"], "parameters": _arguments(c["arguments"])},
                                    ensure_ascii=False) for c in calls)
    if fmt == "mistral":
        listed = [{"name": c["name"], "arguments": _arguments(c["arguments"]),
                   **({"id": c["id"]} if c.get("id") else {})} for c in calls]
        return TOOL_CALLS + json.dumps(listed, ensure_ascii=False)
    if fmt == "pythonic":
        return "[" + ", ".join(
            f"{c['name']}(" + ", ".join(f"{k}={_python_literal(v)}" for k, v in _arguments(c["arguments"]).items())
            + ")" for c in calls) + "]"
    raise ValueError(f"unknown tool-call format {fmt!r}: one of {', '.join(FORMATS)}")


def _python_literal(value: Any) -> str:
    """A JSON value written as the Python literal the pythonic parser reads back (True, None, ...)."""
    if isinstance(value, (bool, type(None))):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_python_literal(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)
