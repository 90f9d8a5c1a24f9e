"""Text as the database can keep it.

PostgreSQL's text and jsonb types cannot hold U+0000, and a model, a judge, a tool or a user's client can produce
it (a byte-level tokenizer has a token for byte 0). What they said is kept, not refused: a scored trajectory must
not be lost over one character. `storable` puts U+FFFD (the replacement character) in its place, on every backend
alike, so SQLite and PostgreSQL show the same text. Token ids are ints and stay as sampled (DESIGN §8.6).
People's own input is refused instead (`holds_nul`), as Django's forms refuse it in text ("Null characters are not
allowed"): the upload's rows, the forms' JSON fields and the API's JSON bodies (webapp.api.parsers).
"""
from __future__ import annotations

from typing import Any

NUL, REPLACEMENT = "\x00", "\ufffd"


def storable(value: Any) -> Any:
    """`value` with U+0000 replaced in every string, dict keys included; lists, tuples and dicts are rebuilt."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT) if NUL in value else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


def holds_nul(value: Any) -> bool:
    """Whether a string anywhere in `value` (dict keys included) holds U+0000."""
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(holds_nul(k) or holds_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(holds_nul(v) for v in value)
    return False
