"""Helpers every page view uses: inline (htmx) validation and turning service errors into form errors."""
from __future__ import annotations

from typing import Any, Callable

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string

from webapp.forms import apply_service_errors
from webapp.server_caps import CapReached


def is_validation_request(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False)) and request.POST.get("_validate") == "1"


def validation_response(request: HttpRequest, form: forms.Form) -> HttpResponse:
    """Out-of-band swaps of each field's error slot: the inputs the user is typing in are left untouched."""
    form.is_valid()
    # Hidden fields (the launch form's one-time token) have no error slot on the page: an out-of-band swap for
    # one would be an htmx:oobErrorNoTarget.
    html = "".join(
        render_to_string("webapp/partials/field_errors.html", {"field": form[name], "oob": True}, request=request)
        for name in form.fields if not form[name].is_hidden
    )
    html += render_to_string("webapp/partials/form_errors.html", {"form": form, "oob": True}, request=request)
    return HttpResponse(html)


def handle_form(request: HttpRequest, form: forms.Form, save: Callable[[dict[str, Any]], HttpResponse],
                template: str, context: dict[str, Any]) -> HttpResponse:
    """POST: validate → service → redirect, or re-render with every error in place (status 400)."""
    if request.method == "POST":
        if is_validation_request(request):
            return validation_response(request, form)
        if form.is_valid():
            try:
                return save(form.cleaned_data)
            except ValidationError as err:
                apply_service_errors(form, err)
            except CapReached as err:  # the page names the cap and lists what holds it, each with a way to end it
                form.add_error(None, str(err))
                return render(request, template, {**context, "form": form, "cap": err}, status=429)
        return render(request, template, {**context, "form": form}, status=400)
    return render(request, template, {**context, "form": form})
