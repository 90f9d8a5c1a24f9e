"""Telling the browsers that something they show changed: a stored RunEvent to the run's pages (channel group
`run_<id>`), a membership change to a project's streams, a Try it session's note to its page (`try_<id>`, read by
live/try_channel.py)."""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from webapp.execution.stopping import process_stopping

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run_{run_id}"


def project_group(project_id: int) -> str:
    return f"project_{project_id}"


def project_access_changed(project_id: int) -> None:
    """Tells every live stream of the project's runs to re-check its user's membership (a member was removed
    or their role changed); best effort like `publish`, and the consumers also re-check on their own."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(project_group(project_id), {"type": "access.changed"})
    except Exception:
        log.exception("could not tell the streams of project %s that its members changed", project_id)


def publish(run_id: int, message: dict) -> None:
    """Best effort: the RunEvent row is the source of truth, and a page that missed this replays it on connect."""
    layer = get_channel_layer()
    if layer is None or process_stopping():  # an exiting server's last events: its sockets are closed already
        return
    try:
        async_to_sync(layer.group_send)(run_group(run_id), {"type": "run.event", **message})
    except Exception:  # a full channel or a Redis blip must not stop training; the page will replay
        log.exception("could not publish event %s of run %s", message.get("seq"), run_id)


def try_group(session_id: int) -> str:
    return f"try_{session_id}"


def try_session_publish(*, session_id: int) -> None:
    """Best effort, after the commit: the row is the source of truth; a page that missed a note reads it on
    (re)connect, or by polling while its socket is closed."""
    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(try_group(session_id), {"type": "try.changed"})
        except Exception:  # a Redis blip must not stop the rollouts
            log.exception("could not tell the pages of Try it session %s that it changed", session_id)

    transaction.on_commit(send)
