"""Endpoints whose every answer is JSON, whatever the client's Accept header says (issue 43): the uploads. A
browser's `Accept: text/html` would otherwise get DRF's browsable page for an upload's refusal, and a client
reading the error as JSON would fail on it."""
from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer


class JSONOnly(DefaultContentNegotiation):
    def select_renderer(self, request: Any, renderers: list, format_suffix: str | None = None) -> tuple:
        return JSONRenderer(), JSONRenderer.media_type


JSON_ONLY = {"renderer_classes": [JSONRenderer], "content_negotiation_class": JSONOnly}
