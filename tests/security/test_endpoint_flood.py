"""Issue 33, item 6, as the attacker does it: slow calls took the database down. Each proxied call held a thread
and a PostgreSQL connection for as long as the run's server took (up to 600 s), so an agent with 128 rollouts in
flight exhausted PostgreSQL's connections for the whole app. Here an ordinary account's agent floods its own
run's endpoint, served by daphne (the app's ASGI server), with more slow calls than the per-run cap: the ones
beyond it get 429 at once, and while the others wait on the (fake, slow) inference server no PostgreSQL
connection of the web process is open (pg_stat_activity, by the web process's application_name)."""
from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from django.db import connection

from tests.security.endpoint_upstream import FakeUpstream, attackers_run, opening
from tests.webapp.conftest import _worker_env, wait_for
from tests.webapp.world import start_daphne, stop_daphne

pytestmark = pytest.mark.django_db(transaction=True)

CAP, CALLS, APP_NAME = 4, 12, "endpoint-under-attack"


@pytest.fixture
def web(tmp_path):
    """A daphne of its own (the world's helpers, tests/webapp/world.py): its per-run cap of CAP and the
    application_name that counts its PostgreSQL connections are settings of the process."""
    db = connection.settings_dict
    env = _worker_env(None) | {
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
                        f"?application_name={APP_NAME}",
        "STUDIO_EXTERNAL_MAX_IN_FLIGHT": str(CAP), "STUDIO_EXTERNAL_PER_MINUTE": "100000"}
    served = start_daphne(env, tmp_path / "daphne.log")
    yield served
    stop_daphne(served)


def _connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP_NAME])
        return cursor.fetchone()[0]


def test_calls_beyond_the_per_run_cap_get_429_and_none_holds_a_connection_while_it_waits(web):
    with FakeUpstream(delay_s=6.0) as upstream:
        run, key = attackers_run(upstream)
        url = f"{web.url}/api/runs/{run.id}/openai/v1/chat/completions"
        answers: list[httpx.Response] = []

        async def flood() -> None:
            async with httpx.AsyncClient(timeout=60) as http:
                answers.extend(await asyncio.gather(*[
                    http.post(url, headers={"Authorization": f"Bearer {key}"}, json={"messages": opening()})
                    for _ in range(CALLS)]))

        attacker = threading.Thread(target=lambda: asyncio.run(flood()))
        attacker.start()
        try:
            wait_for(lambda: len(upstream.chats()) >= CAP, timeout=30, interval=0.05,
                     message="the admitted calls to reach the server")
            time.sleep(0.5)  # the refused ones answered by now; the admitted ones wait another ~5 s
            held = [_connections() for _ in range(10) if not time.sleep(0.1)]
        finally:
            attacker.join(timeout=60)
    assert max(held) == 0, held  # no connection of the web process open while its calls wait upstream
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] * CAP + [429] * (CALLS - CAP), (statuses, web.log.read_text()[-2000:])
    refused = next(a for a in answers if a.status_code == 429)
    assert "STUDIO_EXTERNAL_MAX_IN_FLIGHT" in refused.json()["detail"] and refused.headers["Retry-After"]
    assert len(upstream.chats()) == CAP  # the refused calls never reached the server
