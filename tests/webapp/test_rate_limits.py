"""Rate limits on login and on the API, counted in the configured cache (Redis here, as in production)."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse
from rest_framework.test import APIClient

from tests.webapp.factories import PASSWORD, user_factory

pytestmark = pytest.mark.django_db


def test_failed_logins_for_a_name_are_refused_after_the_limit_even_with_the_right_password(client, settings):
    settings.STUDIO_LOGIN_FAILURES = 3
    user = user_factory()
    for _ in range(3):
        assert client.post(reverse("login"), {"username": user.username, "password": "wrong"}).status_code == 200
    blocked = client.post(reverse("login"), {"username": user.username, "password": PASSWORD})
    assert blocked.status_code == 429 and b"Too many failed logins" in blocked.content
    assert "_auth_user_id" not in client.session
    other = user_factory()  # another name from the same address still logs in
    assert client.post(reverse("login"), {"username": other.username, "password": PASSWORD}).status_code == 302


def test_api_calls_beyond_the_per_user_rate_get_429_with_retry_after(settings):
    settings.STUDIO_API_PER_MINUTE = 5
    api = APIClient()
    api.force_authenticate(user_factory())
    statuses = [api.get("/api/projects/").status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]
    limited = api.get("/api/projects/")
    assert limited.status_code == 429 and int(limited["Retry-After"]) > 0
    fresh = APIClient()
    fresh.force_authenticate(user_factory())  # the limit is per user
    assert fresh.get("/api/projects/").status_code == 200


def test_the_counters_live_in_redis_so_every_web_process_shares_them(settings):
    assert settings.CACHES["default"]["BACKEND"].endswith("RedisCache")
    cache.set("rate-limit-probe", 1, timeout=5)
    import redis

    keys = redis.Redis.from_url(settings.REDIS_URL).keys("*rate-limit-probe*")
    assert len(keys) == 1
