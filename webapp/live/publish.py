"""Sending a stored RunEvent to the browsers watching the run (channel group `run_<id>`)."""
from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run_{run_id}"


def publish(run_id: int, message: dict) -> None:
    """Best effort: the RunEvent row is the source of truth, and a page that missed this replays it on connect."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(run_group(run_id), {"type": "run.event", **message})
    except Exception:  # a full channel or a Redis blip must not stop training; the page will replay
        log.exception("could not publish event %s of run %s", message.get("seq"), run_id)
