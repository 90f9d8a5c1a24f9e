"""The API's JSON bodies from people: refused whole when a string holds U+0000 (webapp.storable).

DRF's CharField refuses it in text fields; JSON fields (scenario metadata, environment options, run overrides)
would pass it on to PostgreSQL, which cannot store it (a 500). The external agents' endpoints parse with the plain
JSONParser: what a model sampled is kept, with U+FFFD in its place.
"""
from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from webapp.storable import holds_nul


class InputJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        if holds_nul(data):
            raise ParseError("the body holds a null character (U+0000), which cannot be stored; remove it")
        return data
