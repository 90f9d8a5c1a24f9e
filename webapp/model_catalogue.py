"""The base models of this deployment (STUDIO_BASE_MODELS, STUDIO_HF_MODELS): the only models an agent may name.

A base model is loaded by the workers (runs, Try it, serving, evaluation, exports), so what an agent names must
never be a path a project member typed: another project's merged export, or /etc, would be read by the worker
(DESIGN invariant 7, docs/security.md). Site administrators list the models here; projects choose an entry by
its name, or a Hugging Face id the deployment allows.

- STUDIO_BASE_MODELS is JSON, `{"name": {"source": ..., "description": ..., "context_length": ...}}`, or `@path`
  to a JSON file of that shape. `source` is a Hugging Face id or an absolute directory on the workers. An entry
  set to null removes a default entry. An entry may also give `chat_template`, the model's chat family
  (training/model/chat_templates) where its own template is not recognised, and `tool_parser`, vLLM's tool-call
  parser. The tiny offline models are always there unless the deployment redefines or removes them: `tiny-2048`
  (the one `make demo` builds under var/tiny-model on first use) and `tiny-games` (var/tiny-games-model, the game
  examples' own model; `python -m training.fixtures.tiny_games_model` builds it).
- STUDIO_HF_MODELS is a comma list of Hugging Face id patterns, e.g. `Qwen/*,meta-llama/Llama-3.2-1B-Instruct`;
  empty (the default) allows none. Ids only: `owner/name` of letters, digits, `_ . -`, never a path.

`resolve(value, ...)` turns what an agent stores into the model the workers load. Pure Python at the top (no
Django), so settings.py parses the variables at start and fails loudly; the `*_base_model*` helpers at the
bottom read the parsed values from Django's settings.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from webapp.mcp_catalogue import named_entries

VARIABLE = "STUDIO_BASE_MODELS"
HF_VARIABLE = "STUDIO_HF_MODELS"
# owner/name as the Hub spells them; one slash, so never a path below a directory.
HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
HF_PATTERN = re.compile(r"^[A-Za-z0-9*][A-Za-z0-9_.*-]{0,95}/[A-Za-z0-9*][A-Za-z0-9_.*-]{0,95}$")
TINY_MODEL = "tiny-2048"
GAMES_MODEL = "tiny-games"  # training/fixtures/examples.py GAMES_MODEL: the Tic Tac Toe, Codenames and Temporal Clue default
# How a shipped model that is not built yet gets built: the launch and the example form say it where it is missing.
BUILD_HINTS = {TINY_MODEL: "`make demo` builds it",
               GAMES_MODEL: "`python -m training.fixtures.tiny_games_model` builds it (several minutes on a CPU)"}
SHOWN_MAX = 120  # how much of a refused value a message repeats


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str = Field(min_length=1, max_length=1000,
                        description="A Hugging Face id or an absolute directory on the workers: what they load.")
    description: str = Field("", max_length=500, description="What the model is for, shown to project members.")
    context_length: int = Field(ge=1, le=10_000_000, description="Tokens of context, shown in the agent form.")
    chat_template: str | None = Field(
        None, max_length=100, description="The model's chat family (training/model/chat_templates: qwen3, qwen2_5, "
        "llama3, gemma3, mistral), for a model whose chat template is not recognised as its family's.")
    tool_parser: str | None = Field(None, max_length=100, pattern=r"^[a-z0-9_]+$",
                                    description="vLLM's --tool-call-parser for the model (default: its family's).")

    @field_validator("chat_template")
    @classmethod
    def _known_family(cls, value: str | None) -> str | None:
        from training.model.chat_templates import FAMILIES

        if value is not None and value not in FAMILIES:
            raise ValueError(f"give a chat family, one of {', '.join(FAMILIES)}")
        return value


@dataclass(frozen=True)
class ResolvedModel:
    """What an agent's base model means on this deployment: `source` is what the workers load."""

    name: str
    source: str
    context_length: int | None = None
    description: str = ""
    chat_template: str | None = None
    tool_parser: str | None = None


class BaseModelChoiceError(ValueError):
    """A base model this deployment does not offer; the message says to choose a model."""


def _is_hf_id(value: str) -> bool:
    return bool(HF_ID.match(value)) and ".." not in value


def _check_source(name: str, source: str) -> None:
    if _is_hf_id(source):
        return
    path = Path(source)
    if not path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{VARIABLE}: entry {name!r}: source {source!r}: give a Hugging Face id (owner/name) or "
                         "an absolute directory on the workers")


def default_entries(base_dir: Path) -> dict[str, ModelEntry]:
    from training.fixtures.tiny_games_model import MODEL_SHAPE as GAMES_SHAPE
    from training.fixtures.tiny_model import MODEL_SHAPE

    return {TINY_MODEL: ModelEntry(
        source=str(base_dir / "var" / "tiny-model"), context_length=int(MODEL_SHAPE["max_position_embeddings"]),
        description="The tiny offline model (no download; `make demo` builds it): it learns 2048 moves on a CPU."),
        GAMES_MODEL: ModelEntry(
        source=str(base_dir / "var" / "tiny-games-model"),
        context_length=int(GAMES_SHAPE["max_position_embeddings"]),
        description="The tiny offline games model (no download; `python -m training.fixtures.tiny_games_model` builds it): "
                    "the Tic Tac Toe, Codenames and Temporal Clue examples' own model, warmed up on their answer "
                    "formats.")}


def parse_catalogue(raw: str | None, *, base_dir: Path) -> dict[str, ModelEntry]:
    """The deployment's entries over the defaults; ValueError naming the variable and what is wrong."""
    entries = default_entries(base_dir)
    for name, entry in named_entries(raw, variable=VARIABLE, shape="{source, description, context_length}").items():
        if entry is None:
            entries.pop(name, None)
            continue
        try:
            entries[name] = ModelEntry.model_validate(entry)
        except ValidationError as err:
            problem = err.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "entry"
            raise ValueError(f"{VARIABLE}: entry {name!r}: {where}: {problem['msg']}") from None
        _check_source(name, entries[name].source)
    return entries


def parse_hf_patterns(raw: str | None) -> list[str]:
    """The allowed Hugging Face id patterns; ValueError on anything but owner/name patterns."""
    patterns = [p.strip() for p in (raw or "").split(",") if p.strip()]
    for pattern in patterns:
        if not HF_PATTERN.match(pattern) or ".." in pattern:
            raise ValueError(f"{HF_VARIABLE}: {pattern!r}: give Hugging Face id patterns as owner/name, e.g. "
                             "Qwen/* (letters, digits, _ . - and *; never a path)")
    return patterns


def hf_allowed(value: str, patterns: list[str]) -> bool:
    return _is_hf_id(value) and any(fnmatch.fnmatchcase(value, p) for p in patterns)


def _resolved(name: str, entry: ModelEntry) -> ResolvedModel:
    return ResolvedModel(name=name, source=entry.source, context_length=entry.context_length,
                         description=entry.description, chat_template=entry.chat_template,
                         tool_parser=entry.tool_parser)


def _refusal(value: str, patterns: list[str]) -> BaseModelChoiceError:
    shown = value if len(value) <= SHOWN_MAX else value[:SHOWN_MAX] + "…"
    allowed = f" or a Hugging Face id matching {', '.join(patterns)}" if patterns else ""
    return BaseModelChoiceError(f"choose a model: {shown!r} is not one of this deployment's models; choose one "
                                f"from its list{allowed}")


def check_choice(value: str, *, entries: dict[str, ModelEntry], hf_patterns: list[str]) -> str:
    """What a person may store as an agent's base model: a catalogue name or an allowed id, never a source."""
    value = (value or "").strip()
    if value in entries or hf_allowed(value, hf_patterns):
        return value
    raise _refusal(value, hf_patterns)


def resolve(value: str, *, entries: dict[str, ModelEntry], hf_patterns: list[str]) -> ResolvedModel:
    """The model an agent's stored base model names. An agent saved before the catalogue stored a source (a
    directory or an id): equal to an entry's source, it is that entry; any other value is refused, so a path a
    member typed is never loaded."""
    value = (value or "").strip()
    if value in entries:
        return _resolved(value, entries[value])
    if hf_allowed(value, hf_patterns):
        return ResolvedModel(name=value, source=value)
    for name, entry in entries.items():
        if value == entry.source:
            return _resolved(name, entry)
    raise _refusal(value, hf_patterns)


# --- The deployment's values (Django settings), for the web app's services, forms and serializers. ---

def _deployment() -> tuple[dict[str, ModelEntry], list[str]]:
    from django.conf import settings

    return settings.STUDIO_BASE_MODELS, settings.STUDIO_HF_MODELS


def hub_model(config: dict[str, Any]) -> str | None:
    """The Hugging Face id the run's engine would load from the hub, or None (a directory, or downloads off): what
    the workers fetch (webapp/execution/model_fetch.py) and the launch checks in their cache."""
    from django.conf import settings

    name = str(config.get("base_model") or "").strip()
    if not settings.STUDIO_MODEL_DOWNLOAD or not HF_ID.match(name) or ".." in name or Path(name).is_dir():
        return None
    return name


def resolve_base_model(value: str) -> ResolvedModel:
    entries, patterns = _deployment()
    return resolve(value, entries=entries, hf_patterns=patterns)


def check_base_model_choice(value: str) -> str:
    entries, patterns = _deployment()
    return check_choice(value, entries=entries, hf_patterns=patterns)


def base_model_choices() -> list[tuple[str, str]]:
    """(name, label) per catalogue entry, the label showing its context length and description."""
    entries, _ = _deployment()
    return [(name, f"{name} ({e.context_length} tokens of context)" + (f": {e.description}" if e.description else ""))
            for name, e in entries.items()]


def hf_model_patterns() -> list[str]:
    return list(_deployment()[1])


def unbuilt_model(name: str) -> str | None:
    """The sentence that says how to build `name` where it is a shipped model (BUILD_HINTS) whose directory is not
    on this machine yet (as the launch's own check finds it); else None."""
    entry = _deployment()[0].get(name)
    if name not in BUILD_HINTS or entry is None or _is_hf_id(entry.source) or Path(entry.source).is_dir():
        return None
    return f"{name} is not built yet: {BUILD_HINTS[name]}"


def model_reasons(value: str) -> bool:
    """Whether base model `value` is of a chat family with a reasoning block a run may keep or drop (Qwen3): by
    its catalogue entry's family, else by its chat template's fingerprint where its files are here (a directory,
    or a hub id in the workers' shared cache, STUDIO_MODEL_CACHE_DIR); nothing is downloaded, and a model neither
    here nor named by the catalogue is taken not to reason."""
    from django.conf import settings

    from training.model.chat_templates import FAMILIES, family_of
    from training.model.chat_templates.serving import model_chat_template
    from training.model.hub import cached_snapshot

    try:
        model = resolve_base_model(value)
    except BaseModelChoiceError:
        return False
    family = FAMILIES.get(model.chat_template or "")
    if family is None:  # a hub id is never read as a path here: its snapshot, if the workers fetched it
        where = Path(model.source) if Path(model.source).is_absolute() else \
            cached_snapshot(model.source, Path(settings.STUDIO_MODEL_CACHE_DIR))
        family = family_of(model_chat_template(str(where))) if where is not None else None
    return family is not None and family.reasoning
