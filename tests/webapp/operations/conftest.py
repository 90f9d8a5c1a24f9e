from __future__ import annotations

import pytest
from django.conf import settings

from webapp.operations import heartbeats


@pytest.fixture(autouse=True)
def no_earlier_heartbeats():
    """Workers other tests started (and killed) leave their presence behind: each test here starts with none."""
    client = heartbeats.redis_client(settings.REDIS_URL)
    keys = list(client.scan_iter(match=heartbeats._key("*")))
    if keys:
        client.delete(*keys)
    yield
