"""SFT data: conversations in the OpenAI chat format, read from JSONL and checked row by row.

One line is one conversation: `{"messages": [...], "tools": [...]}` (tools optional), the format OpenAI's
fine-tuning API, ART's `iterate_file` and TRL read. Every problem names its line and field (`line 4:
messages.2.tool_calls.0.function.arguments: not a JSON object`), and a file with any problem yields no
conversations at all, so a caller stores nothing from a file it has to send back. The web app's dataset upload
and the engine's `sft` run kind read files through the same `parse_jsonl`.

Pure Python (pydantic only): the web process imports it without torch.
"""
from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

MAX_ERRORS = 50  # a file that is wrong everywhere is reported by its first problems, not all of them
# Nesting deeper than this is refused before decoding: Python's JSON decoder recurses per level and a line of
# thousands of nested objects raises RecursionError (a crash, not an answer). Conversations nest about 6 deep;
# tool schemas a little more.
MAX_DEPTH = 64
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """How deep the JSON text nests objects and arrays (brackets inside strings do not count), without decoding
    it (so without recursion). Text that is not JSON gets some number; the decoder then says what is wrong."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _too_deep(text: str, max_depth: int) -> str | None:
    depth = json_depth(text)
    return f"nested {depth} levels deep; the most allowed is {max_depth}" if depth > max_depth else None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionCall(_Strict):
    name: str = Field(min_length=1, max_length=200)
    arguments: str = Field(description="The arguments as a JSON object in a string, as OpenAI sends them.")

    @field_validator("arguments")
    @classmethod
    def _json_object(cls, value: str) -> str:
        if (deep := _too_deep(value, MAX_DEPTH)) is not None:
            raise ValueError(f"the arguments are {deep}")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON ({err.msg}); write the arguments as a JSON object in a string, "
                             "e.g. \"{\\\"q\\\": \\\"fjord\\\"}\"") from None
        if not isinstance(parsed, dict):
            raise ValueError("not a JSON object; write the arguments as an object in a string")
        return value


class ToolCall(_Strict):
    id: str = Field("", max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(None, max_length=200)
    name: str | None = Field(None, max_length=200)

    @model_validator(mode="after")
    def _fits_its_role(self) -> "ChatMessage":
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"a {self.role} message cannot hold tool_calls (only assistant messages do)")
        if self.role == "assistant" and not (self.content or self.tool_calls):
            raise ValueError("an assistant message needs content or tool_calls")
        if self.role in ("system", "user", "tool") and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        return self


class FunctionSpec(_Strict):
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    strict: bool | None = None


class ToolSpec(_Strict):
    type: Literal["function"] = "function"
    function: FunctionSpec


class Conversation(_Strict):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ToolSpec] | None = None

    @model_validator(mode="after")
    def _trainable(self) -> "Conversation":
        if not any(m.role == "assistant" for m in self.messages):
            raise ValueError("no assistant message: nothing to learn from (the loss covers assistant turns only)")
        if any(m.role == "system" for m in self.messages[1:]):
            raise ValueError("a system message may only come first")
        if self.messages[0].role == "assistant":
            raise ValueError("the conversation starts with an assistant message: give the user's (or a system) "
                             "message it answers first")
        return self

    def as_messages(self) -> list[dict[str, Any]]:
        """The messages as the row gave them (keys it left out or set to null stay out), for the chat renderer."""
        return [m.model_dump(exclude_unset=True, exclude_none=True) for m in self.messages]

    def tool_list(self) -> list[dict[str, Any]] | None:
        return [t.model_dump(exclude_unset=True, exclude_none=True) for t in self.tools] if self.tools else None

    def to_json(self) -> dict[str, Any]:
        """The row as a JSONL line holds it (and as the web app stores it)."""
        row: dict[str, Any] = {"messages": self.as_messages()}
        if self.tools:
            row["tools"] = self.tool_list()
        return row


@dataclass(frozen=True)
class RowError:
    line: int
    field: str  # the key path inside the row, "" for the row as a whole
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field + ': ' if self.field else ''}{self.message}"


def _errors_of(line: int, err: ValidationError) -> list[RowError]:
    found = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        found.append(RowError(line, where, message))
    return found


def conversation_parse(row: Any, *, line: int = 1) -> tuple[Conversation | None, list[RowError]]:
    """One row (a decoded JSON value) as a Conversation, or the problems with it."""
    if not isinstance(row, dict):
        return None, [RowError(line, "", f"expected a JSON object with `messages`, got {type(row).__name__}")]
    try:
        return Conversation.model_validate(row), []
    except ValidationError as err:
        return None, _errors_of(line, err)


def parse_jsonl(data: bytes | str, *, max_rows: int | None = None, max_depth: int = MAX_DEPTH,
                max_line_bytes: int | None = None) -> tuple[list[Conversation], list[RowError]]:
    """(conversations, []) when every non-blank line is a valid conversation; ([], errors) otherwise, so a
    caller never keeps part of a file. At most MAX_ERRORS problems are listed. A line nesting deeper than
    `max_depth`, or longer than `max_line_bytes`, is refused as a problem of its line, never decoded."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            return [], [RowError(data[: err.start].count(b"\n") + 1, "", "not UTF-8 text")]
    conversations: list[Conversation] = []
    errors: list[RowError] = []
    rows = 0
    for number, text in enumerate(data.splitlines(), start=1):
        if not text.strip():
            continue
        rows += 1
        if max_rows is not None and rows > max_rows:
            errors.append(RowError(number, "", f"more than {max_rows} conversations; split the file"))
            break
        if "\x00" in text:
            errors.append(RowError(number, "", "holds a null character (U+0000)"))
            continue
        if max_line_bytes is not None and (size := len(text.encode())) > max_line_bytes:
            errors.append(RowError(number, "", f"the conversation is {_size(size)}, more than the "
                                               f"{_size(max_line_bytes)} one conversation may be; no model's context "
                                               "holds that much text: split it into shorter conversations"))
            continue
        if (deep := _too_deep(text, max_depth)) is not None:
            errors.append(RowError(number, "", f"the JSON is {deep}"))
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as err:
            errors.append(RowError(number, "", f"not valid JSON: {err.msg} (column {err.colno})"))
            continue
        conversation, problems = conversation_parse(row, line=number)
        errors += problems
        if conversation is not None:
            conversations.append(conversation)
        if len(errors) >= MAX_ERRORS:
            break
    if not rows and not errors:
        errors.append(RowError(1, "", "the file holds no conversation"))
    return ([], errors[:MAX_ERRORS]) if errors else (conversations, [])


def _size(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB" if n >= 1_000_000 else f"{n / 1000:.0f} kB"


def split_held_out(conversations: list[Any], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train indices, held-out indices): a seeded split by each conversation's content, so reordering or
    appending rows never moves one across. A fraction above 0 holds out at least one, and one is always left
    to train on."""
    if fraction <= 0 or len(conversations) < 2:
        return list(range(len(conversations))), []

    def key(i: int) -> float:
        text = json.dumps(_as_json(conversations[i]), sort_keys=True)
        return zlib.crc32(f"{seed}:{text}".encode()) / 2**32

    held = [i for i in range(len(conversations)) if key(i) < fraction]
    if not held:
        held = [min(range(len(conversations)), key=key)]
    if len(held) == len(conversations):
        held = held[1:]
    chosen = set(held)
    return [i for i in range(len(conversations)) if i not in chosen], held


def _as_json(conversation: Any) -> Any:
    return conversation.to_json() if isinstance(conversation, Conversation) else conversation


def read_conversations(path: str) -> list[Conversation]:
    """The conversations of a JSONL file; a TrainingError naming the first problems otherwise."""
    from pathlib import Path

    from training.types import TrainingError

    p = Path(path)
    if not p.is_file():
        raise TrainingError(f"sft.data_file not found: {p}")
    conversations, errors = parse_jsonl(p.read_bytes())
    if errors:
        listed = "; ".join(str(e) for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise TrainingError(f"{p}: {listed}{more}")
    return conversations
