"""Rules every page and API endpoint applies to what a request carries before it reaches a query or a service
(issue 43; docs/security.md "Bad input"): a whole number beyond what the database stores, and JSON nested deeper
than anything the app writes, are refused with a 400 that names the parameter, never a 500.

`BadInput` is Django's BadRequest, so a page answers it 400 (webapp/api/errors.py names it in the body) and the
API's exception handler turns it into its one error shape with the parameter as the field.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from django.core.exceptions import BadRequest

INT_MAX = 2**63 - 1  # PostgreSQL's bigint and SQLite's INTEGER: an id or a count beyond it is a query error
MAX_JSON_DEPTH = 32  # options, configs and API bodies; what the app writes nests a handful of levels


class BadInput(BadRequest):
    """A request parameter refused before use: `name` is the parameter, the message says what is accepted."""

    def __init__(self, name: str, message: str) -> None:
        self.name, self.message = name, message
        super().__init__(f"{name}: {message}")


def whole_number(raw: Any, *, name: str, minimum: int = 0, maximum: int = INT_MAX) -> int:
    """`raw` (a query or path parameter, a form value) as a whole number from `minimum` to `maximum`."""
    text = str(raw).strip() if raw is not None else ""
    if not text.isascii() or not text.isdigit() or len(text) > 19 or not minimum <= int(text) <= maximum:
        raise BadInput(name, f"must be a whole number from {minimum} to {maximum}, not {text[:40]!r}")
    return int(text)


def optional_whole_number(raw: Any, *, name: str, minimum: int = 0, maximum: int = INT_MAX) -> int | None:
    """As whole_number, None when the parameter is absent or empty."""
    if raw is None or str(raw).strip() == "":
        return None
    return whole_number(raw, name=name, minimum=minimum, maximum=maximum)


def whole_numbers(raws: Iterable[Any], *, name: str, minimum: int = 0, maximum: int = INT_MAX) -> list[int]:
    return [whole_number(raw, name=name, minimum=minimum, maximum=maximum) for raw in raws]


def json_depth(value: Any, *, stop_at: int = MAX_JSON_DEPTH + 1) -> int:
    """How deeply `value` nests lists and objects (a scalar is 0), counted without recursion and no further than
    `stop_at`, so a hostile value costs no stack and little time."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            deepest = max(deepest, depth)
            if depth >= stop_at:
                return depth
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def json_depth_check(value: Any, *, name: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """`value`, or BadInput naming `name` when it nests deeper than `limit`."""
    if json_depth(value, stop_at=limit + 1) > limit:
        raise BadInput(name, f"nests deeper than {limit} levels of lists and objects")
    return value


def json_loads_bounded(text: str | bytes, *, name: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """json.loads, refusing (BadInput naming `name`) what nests deeper than `limit`: the parser itself gives up
    with a RecursionError some levels beyond, which would otherwise be a 500. A ValueError for text that is not
    JSON, as json.loads raises it."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise BadInput(name, f"nests deeper than {limit} levels of lists and objects") from None
    return json_depth_check(value, name=name, limit=limit)
