"""The stdio MCP servers of this deployment (STUDIO_MCP_STDIO_SERVERS): the only commands a project's MCP server
may run. A stdio server is a program the workers start; no project member writes its command, arguments,
environment or working directory. Site administrators name the programs here, in a setting the deployment
owns; projects choose an entry by its name (DESIGN invariant 7, docs/security.md).

The variable is JSON, `{"name": {"command": ..., "args": [...], "env": {...}, "description": ...}}`, or `@path`
to a JSON file of that shape. The shipped mailbox server (training.environments.mailbox_server) is always
there as `mailbox` unless the deployment defines its own entry of that name, so the demos work with no
administrator. Pure Python (no Django), so settings.py can parse the variable at start and fail loudly.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
VARIABLE = "STUDIO_MCP_STDIO_SERVERS"


class CatalogueEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, description="The program the workers run (it speaks MCP on stdin/stdout).")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="Added to the server's scrubbed environment.")
    description: str = Field("", max_length=500, description="What the server offers, shown to project members.")


def default_entries() -> dict[str, CatalogueEntry]:
    return {"mailbox": CatalogueEntry(
        command=sys.executable, args=["-m", "training.environments.mailbox_server", "--transport", "stdio"],
        description="The shipped demo mailbox: search_inbox, read_email and answer over a synthetic inbox.")}



def named_entries(raw: str | None, *, variable: str, shape: str) -> dict[str, Any]:
    """A catalogue variable's entries by name: JSON, or `@path` to a JSON file, of name -> `shape`, each name
    1-64 lower-case letters, digits, _ . or - ({} when unset). Shared by the deployment's catalogues (this one and
    webapp/model_catalogue.py); ValueError naming the variable and what is wrong."""
    if not raw or not raw.strip():
        return {}
    text = raw.strip()
    try:
        if text.startswith("@"):
            text = Path(text[1:]).read_text()
        data: Any = json.loads(text)
    except (OSError, ValueError) as err:
        raise ValueError(f"{variable}: expected JSON (or @path to a JSON file): {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{variable}: expected a JSON object of name -> {shape}")
    for name in data:
        if not NAME.match(str(name)):
            raise ValueError(f"{variable}: entry name {name!r}: use 1-64 lower-case letters, digits, _ . or -")
    return data

def parse_catalogue(raw: str | None) -> dict[str, CatalogueEntry]:
    """The deployment's entries over the defaults; ValueError naming the variable and what is wrong."""
    entries = default_entries()
    for name, entry in named_entries(raw, variable=VARIABLE, shape="{command, args, env, description}").items():
        try:
            entries[name] = CatalogueEntry.model_validate(entry)
        except ValidationError as err:
            problem = err.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "entry"
            raise ValueError(f"{VARIABLE}: entry {name!r}: {where}: {problem['msg']}") from None
    return entries
