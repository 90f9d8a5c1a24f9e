"""Request rules every page shares. Pages are HTML forms and links, so they answer GET and POST only; PUT,
PATCH and DELETE are the API's (which answers them per endpoint). Every response carries a Content Security
Policy: scripts only from this server's files (no inline script, no eval), so text that slips through
escaping still cannot run."""
from __future__ import annotations

from typing import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed

PAGE_METHODS = ("GET", "HEAD", "POST", "OPTIONS")


class _BothModes:
    """Synchronous and asynchronous: under ASGI an async view (the run's endpoint) then runs without a thread
    blocked in this middleware for as long as it waits."""

    sync_capable = async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        early = self.answer(request)
        return early if early is not None else self.after(self.get_response(request))

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        early = self.answer(request)
        return early if early is not None else self.after(await self.get_response(request))

    def answer(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def after(self, response: HttpResponse) -> HttpResponse:
        return response


class PageMethodsMiddleware(_BothModes):
    def answer(self, request: HttpRequest) -> HttpResponse | None:
        if request.method not in PAGE_METHODS and not request.path.startswith("/api/"):
            return HttpResponseNotAllowed(["GET", "POST"])
        return None


# style-src keeps 'unsafe-inline': plotly writes its chart styles into <style> elements at run time. Scripts,
# the thing an injected payload needs, get no such exception. ws:/wss: for the run page's live stream.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'", "img-src 'self' data:",
    "connect-src 'self' ws: wss:", "font-src 'self'", "object-src 'none'", "base-uri 'self'",
    "form-action 'self'", "frame-ancestors 'none'",
])


class SecurityHeadersMiddleware(_BothModes):
    def after(self, response: HttpResponse) -> HttpResponse:
        response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
        response.setdefault("Cross-Origin-Resource-Policy", "same-origin")
        return response
