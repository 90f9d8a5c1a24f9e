"""One error shape for the whole API (the schema's `Error`, webapp/api/schema.py): `{"detail": "…"}`, and for a
400 also each refused field with its messages."""
from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler, set_rollback

from webapp.input_rules import BadInput
from webapp.limits import LimitExceeded
from webapp.server_caps import CapReached
from webapp.services.external import ExternalRefusal


def exception_handler(exc, context):
    """Services raise Django's ValidationError; the API answers it as a 400 with the same field messages."""
    if isinstance(exc, LimitExceeded):  # a project limit: 413 (bytes) or 409 (counts), naming limit and usage
        set_rollback()
        return Response(exc.as_body(), status=exc.status)
    if isinstance(exc, CapReached):  # servers, sessions, distillations: 429 naming the cap, usage and holders
        set_rollback()
        return Response(exc.as_body(), status=exc.status)
    if isinstance(exc, ExternalRefusal):  # external rollouts: 409 / 413 / 422, said in a sentence
        refusal = exceptions.APIException(detail=str(exc))
        refusal.status_code = exc.status
        exc = refusal
    if isinstance(exc, BadInput):  # a parameter out of range or nested too deep: a 400 naming it
        exc = exceptions.ValidationError({exc.name: [exc.message]})
    if isinstance(exc, DjangoValidationError) and (duplicate := _duplicate(exc)):  # a name taken: 409, documented
        set_rollback()
        return Response({"detail": duplicate, **exc.message_dict}, status=409)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": exc.messages}
        exc = exceptions.ValidationError(detail=detail)
    unknown = _unknown_ids(exc) if isinstance(exc, exceptions.ValidationError) else []
    if unknown:  # as for an id in the path: no such object, or one of a project the caller is not a member of
        exc = exceptions.NotFound(detail=f"No {' or '.join(unknown)} with that id (or it belongs to a project you "
                                         "are not a member of).")
    response = drf_exception_handler(exc, context)
    if response is not None:
        response.data = error_body(response.data)
    return response


_DUPLICATE_CODES = frozenset({"unique", "unique_together"})


def _duplicate(exc: DjangoValidationError) -> str | None:
    """The message of a refusal that only says the object exists already (a name taken in the project): the
    request was valid, so it is a conflict (409), not bad input."""
    if not hasattr(exc, "error_dict"):
        return None
    errors = [error for field_errors in exc.error_dict.values() for error in field_errors]
    if not errors or any(error.code not in _DUPLICATE_CODES for error in errors):
        return None
    return " ".join(message for error in errors for message in error.messages)


def _unknown_ids(exc: exceptions.ValidationError) -> list[str]:
    """The fields of a refusal that only names ids of objects that do not exist (DRF's `does_not_exist`)."""
    codes = exc.get_codes()
    if not isinstance(codes, dict) or not codes:
        return []
    if any(field_codes != ["does_not_exist"] for field_codes in codes.values()):
        return []
    return [field.replace("_", " ") for field in codes]


def error_body(data) -> dict:
    if isinstance(data, list):  # a ValidationError raised with a message rather than fields
        return {"detail": " ".join(str(message) for message in data) or "Invalid input."}
    if isinstance(data, dict):
        if isinstance(data.get("detail"), list):
            data = {**data, "detail": " ".join(str(message) for message in data["detail"])}
        return data if "detail" in data else {"detail": "Invalid input: see the fields named.", **data}
    return {"detail": str(data)}


# Django answers what never reaches a DRF view itself (a path no route matches, e.g. /api/runs/0.5/steps/, or a
# crash outside DRF). Under /api/ those answers take the API's one error shape too; elsewhere Django's pages.
_PAGE_HANDLERS = {400: "bad_request", 403: "permission_denied", 404: "page_not_found", 500: "server_error"}
_API_DETAIL = {400: "Bad request.", 403: "You do not have permission to perform this action.",
               404: "Not found: no API route has this path (ids are whole numbers).", 500: "Server error."}


def _django_error(status: int):
    from django.http import HttpResponseBadRequest, JsonResponse
    from django.views import defaults

    def view(request, exception=None):
        if isinstance(exception, BadInput):  # named, on a page as on the API (a plain-text page: never markup)
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": str(exception), exception.name: [exception.message]}, status=400)
            return HttpResponseBadRequest(str(exception), content_type="text/plain; charset=utf-8")
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": _API_DETAIL[status]}, status=status)
        page = getattr(defaults, _PAGE_HANDLERS[status])
        return page(request) if status == 500 else page(request, exception)

    view.__name__ = f"api_aware_{status}"
    return view


api_aware_400, api_aware_403, api_aware_404, api_aware_500 = (_django_error(code) for code in (400, 403, 404, 500))
