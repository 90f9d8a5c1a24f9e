"""One error shape for the whole API (the schema's `Error`, webapp/api/schema.py): `{"detail": "…"}`, and for a
400 also each refused field with its messages."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from webapp.services.external import ExternalRefusal


def exception_handler(exc, context):
    """Services raise Django's ValidationError; the API answers it as a 400 with the same field messages."""
    if isinstance(exc, ExternalRefusal):  # external rollouts: 409 / 413 / 422, said in a sentence
        refusal = exceptions.APIException(detail=str(exc))
        refusal.status_code = exc.status
        exc = refusal
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    response = drf_exception_handler(exc, context)
    if response is not None:
        response.data = error_body(response.data)
    return response


def error_body(data) -> dict:
    if isinstance(data, list):  # a ValidationError raised with a message rather than fields
        return {"detail": " ".join(str(message) for message in data) or "Invalid input."}
    if isinstance(data, dict):
        if isinstance(data.get("detail"), list):
            data = {**data, "detail": " ".join(str(message) for message in data["detail"])}
        return data if "detail" in data else {"detail": "Invalid input: see the fields named.", **data}
    return {"detail": str(data)}
