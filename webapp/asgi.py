"""ASGI entry point: `daphne webapp.asgi:application` (pages, API, websockets and static files).

Static files are served by the app itself (no CDN, no separate web server needed for a laptop or a demo).
"""
from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path  # noqa: E402

from webapp.live.consumers import RunConsumer  # noqa: E402
from webapp.live.try_channel import TryConsumer  # noqa: E402

websocket_urlpatterns = [path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
                         path("ws/try/<int:session_id>/", TryConsumer.as_asgi())]

application = ProtocolTypeRouter({
    "http": ASGIStaticFilesHandler(django_asgi),
    "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
})
