"""What the OpenAPI schema says beyond the serializers: every error the API can answer, in its one shape
(webapp/api/errors.py), and the rate limit's 429 with Retry-After. drf-spectacular calls `error_responses`
after it has built the schema (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"])."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from webapp.input_rules import INT_MAX

ERROR_SCHEMA = {
    "type": "object",
    "description": "Every error of the API. `detail` says what went wrong in a sentence; a 400 also names each "
                   "field it refused, with that field's messages (a list of strings, or for a list of objects "
                   "one entry per object). A 409, 413 or 429 over a limit or cap also names it and its numbers "
                   "(`limit_name` or `cap`, `limit`, `usage`).",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
    "additionalProperties": {"oneOf": [{"type": "array"}, {"type": "object"}, {"type": "string"},
                                       {"type": "integer"}]},
}

_ERRORS = {
    "400": "Bad input: a field or a query parameter was refused; the body names it. Nothing was changed.",
    "401": "No valid credentials: send `Authorization: Token <key>` (tokens are made on the API token page).",
    "403": "A member of the project whose role does not allow this (viewer, reviewer, editor, admin).",
    "404": "No such object, or it belongs to a project you are not a member of (the two are not told apart).",
    "409": "Conflict: the request was valid but clashes with what exists, e.g. a name the project uses already "
           "(agents, scenario sets, rubrics, judges, datasets, MCP servers); the body says which. Nothing was changed.",
    "429": "Too many requests: wait the number of seconds in `Retry-After`, then retry.",
}
_WRITES = {"post", "put", "patch", "delete"}


_NOT_NULL = [{"type": t} for t in ("object", "array", "string", "number", "boolean")]


class StudioAutoSchema(AutoSchema):
    """drf-spectacular's schema, plus two refusals it leaves out: a list that may not be empty (DRF's
    `allow_empty=False`) says `minItems: 1`, and a JSON field that may not be null says which values it takes
    (an object where the model keeps an object, e.g. environment options; otherwise any JSON value but null)."""

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        lists = (serializers.ListSerializer, serializers.ListField)
        if isinstance(field, lists) and not field.allow_empty and schema.get("type") == "array":
            schema["minItems"] = max(1, schema.get("minItems", 0))
        if isinstance(field, serializers.JSONField) and not field.allow_null and "type" not in schema \
                and "anyOf" not in schema and "oneOf" not in schema:
            schema.update({"type": "object"} if _model_default(field) is dict else {"anyOf": _NOT_NULL})
        return schema


def _model_default(field) -> Any:
    model = getattr(getattr(field.parent, "Meta", None), "model", None)
    try:
        return model._meta.get_field(field.source).default if model is not None else None
    except Exception:  # noqa: BLE001 - a serializer field with no model field behind it
        return None


def rate_limits_text() -> str:
    return (f"Each user may make {settings.STUDIO_API_PER_MINUTE} API calls a minute, and each address without "
            f"credentials {settings.STUDIO_API_ANON_PER_MINUTE}; beyond that the API answers 429 with a "
            "`Retry-After` header giving the seconds to wait. Administrators set the limits with "
            "STUDIO_API_PER_MINUTE and STUDIO_API_ANON_PER_MINUTE."
            + (f" This deployment multiplies every limit by {settings.STUDIO_THROTTLE_SCALE} (STUDIO_THROTTLE_SCALE, "
               "meant for test deployments only)." if settings.STUDIO_THROTTLE_SCALE > 1 else ""))


def _response(code: str) -> dict[str, Any]:
    response: dict[str, Any] = {"description": _ERRORS[code],
                                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    if code == "429":
        response["headers"] = {"Retry-After": {"description": "Seconds to wait before the next call.",
                                               "schema": {"type": "integer", "minimum": 0}}}
    return response


def _non_blank_strings(schemas: dict[str, Any]) -> None:
    """DRF's CharField strips whitespace before its non-blank check, so a request string of spaces is refused
    like an empty one: `pattern: \\S` (a character that is not a space) says so. The login's password is the one
    string that is not stripped."""
    for name, component in schemas.items():
        if not name.endswith("Request") or name == "AuthTokenRequest":
            continue
        for prop in component.get("properties", {}).values():
            if prop.get("type") == "string" and prop.get("minLength") == 1 and "format" not in prop:
                prop.setdefault("pattern", r"\S")


def _bounded_integers(node: Any) -> None:
    """Every whole number the API reads, in a body, a query or a path, fits 64 bits (webapp/input_rules.py):
    beyond that it is a 400 naming it, so the schema says so."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            node.setdefault("maximum", INT_MAX)
            node.setdefault("minimum", -INT_MAX)
        for value in node.values():
            _bounded_integers(value)
    elif isinstance(node, list):
        for value in node:
            _bounded_integers(value)


def error_responses(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    _non_blank_strings(result["components"]["schemas"])
    _bounded_integers(result["components"]["schemas"])
    _bounded_integers(result.get("paths", {}))
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in _WRITES | {"get", "head"}:
                continue
            parameters = operation.get("parameters", [])
            codes = ["401", "403", "429"]
            if method in _WRITES or any(p.get("in") == "query" for p in parameters):
                codes.append("400")
            # Ids in the path, and ids in a body, name objects the user may not see.
            if "{" in path or method in _WRITES:
                codes.append("404")
            if method in ("post", "put", "patch"):  # a name taken, a state that does not allow it
                codes.append("409")
            for code in codes:
                operation["responses"].setdefault(code, _response(code))
            for code, response in operation["responses"].items():  # refusals an operation names (409, 413, 422)
                if code[:1] == "4" and "content" not in response:
                    response["content"] = _response("400")["content"]
    result.setdefault("info", {})["description"] = (
        f"{result['info'].get('description', '')}\n\n## Errors\n\nEvery error has one shape, `Error`: "
        "`{\"detail\": \"…\"}`, and for a 400 also the refused fields, e.g. "
        "`{\"detail\": \"Invalid input.\", \"name\": [\"This field may not be blank.\"]}`.\n\n"
        + "\n".join(f"- **{code}**: {text}" for code, text in _ERRORS.items())
        + f"\n\n## Rate limits\n\n{rate_limits_text()}\n\n## Lists\n\nEvery list, nested ones included "
        "(`/api/runs/{id}/steps/`, …), is paginated the same way: `?limit=` (1 to 1000, default 50) and "
        "`?offset=` (0 or more), answered as `{count, next, previous, results}`.")
    return result
