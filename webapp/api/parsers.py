"""The API's JSON bodies from people: refused whole when a string holds U+0000 (webapp.storable).

DRF's CharField refuses it in text fields; JSON fields (scenario metadata, environment options, run overrides)
would pass it on to PostgreSQL, which cannot store it (a 500). The external agents' endpoints parse with the plain
JSONParser: what a model sampled is kept, with U+FFFD in its place. Every body is bounded in depth.
"""
from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from webapp.input_rules import MAX_JSON_DEPTH, BadInput, json_depth_check
from webapp.storable import holds_nul


class BoundedJSONParser(JSONParser):
    """JSON nested deeper than MAX_JSON_DEPTH is a 400 naming the body (webapp/input_rules.py), never the
    parser's RecursionError (a 500)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise BadInput("body", f"nests deeper than {MAX_JSON_DEPTH} levels of lists and objects") from None
        return json_depth_check(data, name="body")


class InputJSONParser(BoundedJSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        if holds_nul(data):
            raise ParseError("the body holds a null character (U+0000), which cannot be stored; remove it")
        return data
