"""Rate limits on login and on the API, counted in the configured cache (Redis here, as in production)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache
from django.urls import reverse
from rest_framework.test import APIClient

from webapp.api.schema import rate_limits_text

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


# Every limit a request can run into as a 429: the ones STUDIO_THROTTLE_SCALE must raise for a fuzzer to see past.
LIMITS_ANSWERED_WITH_429 = [
    "STUDIO_API_PER_MINUTE", "STUDIO_API_ANON_PER_MINUTE", "STUDIO_LOGIN_FAILURES", "STUDIO_LOGIN_FAILURES_PER_ADDRESS",
    "STUDIO_EXTERNAL_PER_MINUTE", "STUDIO_EXTERNAL_MAX_IN_FLIGHT", "STUDIO_MAX_SERVERS_PER_ACCOUNT",
    "STUDIO_MAX_SERVERS_PER_PROJECT", "STUDIO_MAX_TRY_SESSIONS_PER_ACCOUNT", "STUDIO_MAX_TRY_SESSIONS_PER_PROJECT",
    "STUDIO_MAX_DISTILLATIONS_PER_ACCOUNT", "STUDIO_MAX_DISTILLATIONS_PER_PROJECT"]


def _limits_at_start(**environ: str) -> subprocess.CompletedProcess:
    """The limits a freshly started process reads from its environment (settings are read once, at import)."""
    env = {k: v for k, v in os.environ.items() if k != "STUDIO_THROTTLE_SCALE" and k not in LIMITS_ANSWERED_WITH_429}
    env.update(environ, DJANGO_SETTINGS_MODULE="tests.webapp.settings")
    code = ("import json, sys; from django.conf import settings; "
            f"print(json.dumps({{name: getattr(settings, name) for name in {LIMITS_ANSWERED_WITH_429!r}}}))")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])


def test_a_test_deployment_raises_every_limit_answered_with_429_by_one_scale():
    plain, scaled = _limits_at_start(), _limits_at_start(STUDIO_THROTTLE_SCALE="1000", STUDIO_API_PER_MINUTE="7")
    assert plain.returncode == 0 and scaled.returncode == 0, plain.stderr + scaled.stderr
    plain_limits, scaled_limits = json.loads(plain.stdout), json.loads(scaled.stdout)
    assert scaled_limits["STUDIO_API_PER_MINUTE"] == 7000  # a limit the deployment set is scaled too
    for name in LIMITS_ANSWERED_WITH_429:
        if name != "STUDIO_API_PER_MINUTE":
            assert scaled_limits[name] == plain_limits[name] * 1000, name


@pytest.mark.parametrize("raw", ["0", "-5", "lots", "1.5"])
def test_a_scale_that_is_not_a_whole_number_of_at_least_one_stops_the_start_naming_it(raw):
    result = _limits_at_start(STUDIO_THROTTLE_SCALE=raw)
    assert result.returncode != 0 and "ImproperlyConfigured: STUDIO_THROTTLE_SCALE" in result.stderr


def test_the_api_docs_say_when_a_deployment_raised_its_limits(settings):
    settings.STUDIO_THROTTLE_SCALE = 1
    assert "STUDIO_THROTTLE_SCALE" not in rate_limits_text()
    settings.STUDIO_THROTTLE_SCALE, settings.STUDIO_API_PER_MINUTE = 1000, 600000
    text = rate_limits_text()
    assert "600000 API calls a minute" in text and "multiplies every limit by 1000" in text


def test_password_guesses_through_the_api_token_endpoint_are_refused_after_the_login_limit(client, settings):
    settings.STUDIO_LOGIN_FAILURES = 3
    user = user_factory()
    api = APIClient()
    for _ in range(3):
        wrong = api.post("/api/token/", {"username": user.username, "password": "wrong"}, format="json")
        assert wrong.status_code == 400
    blocked = api.post("/api/token/", {"username": user.username, "password": PASSWORD}, format="json")
    assert blocked.status_code == 429 and int(blocked["Retry-After"]) > 0
    assert "token" not in blocked.json() and "Too many failed logins" in blocked.json()["detail"]
    # One set of counters: a name the API blocked is blocked on the login page too.
    assert client.post(reverse("login"), {"username": user.username, "password": PASSWORD}).status_code == 429
    other = user_factory()  # another name from the same address still gets its token
    assert "token" in api.post("/api/token/", {"username": other.username, "password": PASSWORD}, format="json").json()
