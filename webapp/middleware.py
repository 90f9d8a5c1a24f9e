"""Request rules every page shares. Pages are HTML forms and links, so they answer GET and POST only; PUT,
PATCH and DELETE are the API's (which answers them per endpoint)."""
from __future__ import annotations

from typing import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed

PAGE_METHODS = ("GET", "HEAD", "POST", "OPTIONS")


class PageMethodsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in PAGE_METHODS and not request.path.startswith("/api/"):
            return HttpResponseNotAllowed(["GET", "POST"])
        return self.get_response(request)
