"""Try it's live channel (issue 48): each stored update of a session reaches the pages showing it, as it happens.

Writers (webapp/execution/trying.py, webapp/services/trying.py) call publish.py's `try_session_publish` once they
have saved the session; a note goes to the session's group `try_<id>` after the commit, through the channel layer
the run events use: Redis between Celery workers and daphne, the in-memory layer (layers.py) with the embedded
executor. The sending half lives in publish.py, below the services that call it; this module is the socket.

Client: /ws/try/<id>/. The socket is let in as the run page's is (consumers.MemberSocket: 4401, 4404 for a
non-member or a session of another project, 4403 when access is lost). On connect and after each note it sends
the session as it is now, one JSON object: {"status", "live", "columns": [{"status", "text"}], "html"}; `html`
is the session view rendered from the page's own context and template (views/trying.py), so a page that joins
late or reconnects shows exactly what a reload shows. Notes only say that something changed: the socket reads the
row again, so a late note never shows an older state, and the notes of one PACE_S are folded into one read.
"""
from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import Http404, HttpRequest
from django.middleware.csrf import get_token
from django.template.loader import render_to_string

from webapp.live.consumers import RECHECK_S, MemberSocket
from webapp.live.publish import try_group

CSRF_SECRET = re.compile(r"[a-zA-Z0-9]{32}")  # the cookie as Django sets it (get_token masks it)
PACE_S = 0.1  # a page gets at most ~10 views a second, however often the columns grow


def try_session_message(*, session_id: int, user: Any, csrf_secret: str | None) -> dict[str, Any] | None:
    """The session as its page shows it now (None once it is gone). The forms of a finished session carry a
    token for the socket's own CSRF cookie, as the page's would."""
    from webapp.models import TrySession
    from webapp.views.trying import try_session_context

    session = TrySession.objects.select_related("project", "server").filter(pk=session_id).first()
    if session is None:
        return None
    context = try_session_context(user=user, session=session)
    if csrf_secret and CSRF_SECRET.fullmatch(csrf_secret):  # else no token: a form posted from it is refused
        request = HttpRequest()
        request.META["CSRF_COOKIE"] = csrf_secret
        context["csrf_token"] = get_token(request)
    view = context["view"]
    return {"status": session.status, "live": session.live,
            "columns": [{"status": c["status"], "text": c["final"]} for c in view["columns"]],
            "html": render_to_string("webapp/partials/try_session.html", context)}


def _session_project(*, user: Any, session_id: int) -> int | None:
    from webapp.models import TrySession
    from webapp.selectors import access

    try:
        return access.in_project_get(user=user, model=TrySession, pk=session_id).project_id
    except Http404:
        return None


class TryConsumer(MemberSocket):
    def visible_project(self, *, user) -> int | None:
        return _session_project(user=user, session_id=self.session_id)

    async def connect(self) -> None:
        self.session_id = int(self.scope["url_route"]["kwargs"]["session_id"])
        if not await self.admit():
            return
        self._changed = asyncio.Event()
        # Join before the first read: a change saved in between is read twice at worst, never missed.
        await self.channel_layer.group_add(try_group(self.session_id), self.channel_name)
        await self.accept()
        await self._send_now()
        self._sender = asyncio.create_task(self._send_loop())

    def stop_streaming(self) -> None:
        if hasattr(self, "_sender") and self._sender is not asyncio.current_task():
            self._sender.cancel()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "_changed"):
            await self.channel_layer.group_discard(try_group(self.session_id), self.channel_name)
        await super().disconnect(code)

    async def try_changed(self, message: dict) -> None:
        self._changed.set()  # read by `_send_loop`: this handler returns at once, so notes never queue up

    async def _send_loop(self) -> None:
        while True:
            await self._changed.wait()
            await asyncio.sleep(max(0.0, self._sent_at + PACE_S - time.monotonic()))
            self._changed.clear()
            if time.monotonic() - self.checked_at > RECHECK_S and not await self.still_allowed():
                return
            await self._send_now()

    async def _send_now(self) -> None:
        self._sent_at = time.monotonic()
        cookies = self.scope.get("cookies") or {}
        message = await database_sync_to_async(try_session_message)(
            session_id=self.session_id, user=self.scope["user"], csrf_secret=cookies.get(settings.CSRF_COOKIE_NAME))
        if message is None:
            await self.close(code=4404)
            return
        await self.send_json(message)
