"""The one seam of operations: /healthz, /readyz and /metrics, answered first in MIDDLEWARE.

First, because probes and scrapers reach a process by its container or pod address, which ALLOWED_HOSTS need not
list (CommonMiddleware would answer 400), and over plain HTTP inside the deployment (no HTTPS redirect). These
answers build no URL from the Host header, which is what host validation protects.
- GET /healthz: 200 while the process answers; touches nothing else (a liveness probe).
- GET /readyz: 200 when ready, 503 otherwise; JSON naming each check and what is down (health.py).
- GET /metrics: Prometheus text, with `Authorization: Bearer <STUDIO_METRICS_TOKEN>`; 401 without it or with
  another. With no STUDIO_METRICS_TOKEN set the path is not served at all (the site's ordinary 404).
"""
from __future__ import annotations

import hmac
from typing import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse

PATHS = ("/healthz", "/readyz", "/metrics")


def _healthz() -> HttpResponse:
    return JsonResponse({"status": "ok"})


def _readyz() -> HttpResponse:
    from webapp.operations.health import readiness

    result = readiness()
    return JsonResponse(result.model_dump(), status=200 if result.ready else 503)


def _metrics(request: HttpRequest) -> HttpResponse:
    from webapp.operations.metrics import metrics_exposition

    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                             settings.STUDIO_METRICS_TOKEN.encode()):
        refused = JsonResponse({"detail": "send the deployment's metrics token: Authorization: Bearer <token>"},
                               status=401)
        refused["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return refused
    body, content_type = metrics_exposition(accept=request.headers.get("Accept", ""))
    return HttpResponse(body, content_type=content_type)


def _answer(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    path = request.path_info.rstrip("/")
    response = _healthz() if path == "/healthz" else _readyz() if path == "/readyz" else _metrics(request)
    response["Cache-Control"] = "no-store"
    return response


def _mine(request: HttpRequest) -> bool:
    path = request.path_info.rstrip("/")
    return path in PATHS and (path != "/metrics" or bool(settings.STUDIO_METRICS_TOKEN))


class OperationsMiddleware:
    sync_capable = async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        return _answer(request) if _mine(request) else self.get_response(request)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        if not _mine(request):
            return await self.get_response(request)
        # The checks and the scrape query the database: off the event loop, like any synchronous view.
        return await sync_to_async(_answer)(request)
