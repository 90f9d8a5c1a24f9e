"""Rate limits: API calls (DRF throttles whose rates are read from settings at request time, so they follow
the environment and tests) and failed logins (per address and username, and per address). Counters are in the
default cache: Redis when configured, shared by all web processes; the in-process cache on the embedded default.
"""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from webapp.operations.counters import ENDPOINT_CALLS_REFUSED


class ApiUserThrottle(UserRateThrottle):
    def get_rate(self) -> str:
        return f"{settings.STUDIO_API_PER_MINUTE}/min"


class ApiAnonThrottle(AnonRateThrottle):
    def get_rate(self) -> str:
        return f"{settings.STUDIO_API_ANON_PER_MINUTE}/min"


def _count(key: str) -> int:
    window = settings.STUDIO_LOGIN_WINDOW_S
    cache.add(key, 0, timeout=window)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window)
        return 1


def _keys(request: HttpRequest, username: str) -> tuple[str, str]:
    address = request.META.get("REMOTE_ADDR", "")
    return f"login-fail:{address}:{username.lower()}", f"login-fail:{address}"


def _blocked(request: HttpRequest, username: str) -> bool:
    per_user, per_address = _keys(request, username)
    return ((cache.get(per_user) or 0) >= settings.STUDIO_LOGIN_FAILURES
            or (cache.get(per_address) or 0) >= settings.STUDIO_LOGIN_FAILURES_PER_ADDRESS)


def login_blocked(request: HttpRequest, username: str) -> bool:
    """Too many failed logins for this name from this address, or from this address at all (the login page and
    POST /api/token/ share the counters)."""
    return _blocked(request, username)


def login_failed(request: HttpRequest, username: str) -> None:
    for key in _keys(request, username):
        _count(key)


class LoginView(auth_views.LoginView):
    """Django's login page, refusing (429) once too many attempts for the name or the address failed."""

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        username = (request.POST.get("username") or "").strip()[:150]
        if username and _blocked(request, username):
            minutes = max(1, settings.STUDIO_LOGIN_WINDOW_S // 60)
            return HttpResponse(f"Too many failed logins for this name or address; try again in {minutes} min.",
                                status=429, content_type="text/plain")
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form) -> HttpResponse:
        username = (self.request.POST.get("username") or "").strip()[:150]
        if username:
            for key in _keys(self.request, username):
                _count(key)
        return super().form_invalid(form)


class ExternalThrottle(UserRateThrottle):
    """A run's OpenAI-compatible endpoint: an agent samples many times a step, so it has a limit of its own."""

    scope = "external"

    def get_rate(self) -> str:
        return f"{settings.STUDIO_EXTERNAL_PER_MINUTE}/min"

    def allow_request(self, request, view) -> bool:
        allowed = super().allow_request(request, view)
        if not allowed:
            ENDPOINT_CALLS_REFUSED.labels("rate").inc()  # /metrics: studio_endpoint_calls_refused_total
        return allowed
