"""An MCP server's tools and results in the shapes an agent is given: OpenAI `tools` (validated, capped) and the
text of a `tool` message."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from training.environments.mcp_faults import McpInvalidToolSchema, McpToolsTooLarge

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what OpenAI-style function calling accepts
# Every prompt carries the tools: a server listing thousands, or a tool of megabytes, would fill the context and
# the pages. Above these the server is refused, naming the cap (McpToolsTooLarge).
MAX_TOOLS = 128
MAX_DESCRIPTION_CHARS = 4000
MAX_SCHEMA_CHARS = 16000


@dataclass
class ToolResult:
    content: str  # what the agent sees as the `tool` message
    is_error: bool


def openai_tools(listed: list[Any]) -> list[dict[str, Any]]:
    """MCP tools → OpenAI `tools`; a tool whose name or input schema a model cannot be given is refused."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if len(listed) > MAX_TOOLS:
        raise McpToolsTooLarge(f"the server lists {len(listed)} tools, more than the {MAX_TOOLS} an agent may be "
                               "given (every prompt carries them all): serve fewer tools from this server")
    tools = []
    for tool in listed:
        if len(tool.description or "") > MAX_DESCRIPTION_CHARS:
            raise McpToolsTooLarge(f"tool {tool.name[:80]!r} has a description of {len(tool.description)} "
                                   f"characters, more than {MAX_DESCRIPTION_CHARS}")
        size = len(json.dumps(tool.input_schema, ensure_ascii=False))
        if size > MAX_SCHEMA_CHARS:
            raise McpToolsTooLarge(f"tool {tool.name[:80]!r} has an input schema of {size} characters, more than "
                                   f"{MAX_SCHEMA_CHARS}")
        if not TOOL_NAME.match(tool.name):
            raise McpInvalidToolSchema(f"the server lists a tool named {tool.name[:80]!r}: tool names must be 1-64 "
                                       "letters, digits, _ or -")
        schema = tool.input_schema
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as err:
            raise McpInvalidToolSchema(f"tool {tool.name!r} has an invalid input schema: {err.message[:300]}") \
                from None
        if schema.get("type") != "object":
            raise McpInvalidToolSchema(f"tool {tool.name!r} has an input schema of type {schema.get('type')!r}; "
                                       "tool arguments must be an object")
        tools.append({"type": "function", "function": {
            "name": tool.name, "description": tool.description or "", "parameters": schema}})
    return tools


def result_text(result: Any, max_chars: int) -> ToolResult:
    parts = []
    for block in result.content:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'unknown')} content omitted]")
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}… [{len(text) - max_chars} more characters cut]"
    return ToolResult(f"error: {text}" if result.is_error else text, bool(result.is_error))
