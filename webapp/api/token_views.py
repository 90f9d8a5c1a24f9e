"""POST /api/token/: a username and password for the user's API token, behind the login page's limits.

DRF's own view has no throttle at all, so without these a script could guess passwords here that the login page
refuses after a few. The same counters as the login page's (webapp/ratelimit.py): a name or address blocked on
one is blocked on the other, 429 with Retry-After once blocked. A view of its own module: webapp.ratelimit is
imported while DRF builds its APIView (DEFAULT_THROTTLE_CLASSES) and cannot import DRF's views itself.
"""
from __future__ import annotations

from django.conf import settings
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.exceptions import Throttled, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from webapp.ratelimit import login_blocked, login_failed


class TokenView(ObtainAuthToken):
    def post(self, request: Request, *args, **kwargs) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        username = str(data.get("username") or "").strip()[:150]
        if username and login_blocked(request._request, username):
            raise Throttled(wait=settings.STUDIO_LOGIN_WINDOW_S,
                            detail="Too many failed logins for this name or address; try again later.")
        try:
            return super().post(request, *args, **kwargs)
        except ValidationError:
            if username:
                login_failed(request._request, username)
            raise
