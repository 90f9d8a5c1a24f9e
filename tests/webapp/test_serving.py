"""The project's on-demand inference server (issue 37): started by the executor (here the embedded one) as a child
process on the tiny model, never in the web process; ready with its start time recorded; kept up while it is
used; down after its idle time; started again when its worker is gone."""
from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from django.conf import settings
from django.utils import timezone

from tests.webapp.conftest import wait_for
from tests.webapp.factories import project_factory
from tests.webapp.serving_world import serving  # noqa: F401  (fixture)
from webapp.models import ProjectServer

pytestmark = pytest.mark.django_db(transaction=True)


def _listening(base_url: str) -> bool:
    url = urlsplit(base_url)
    with socket.socket() as s:
        return s.connect_ex((url.hostname, url.port)) == 0


@pytest.fixture
def quick_idle(serving, settings):  # noqa: F811
    """The server stops after 2 s without use: these tests wait for that stop."""
    settings.STUDIO_SERVE_IDLE_S = 2.0
    return serving


def test_the_server_starts_on_the_executor_answers_with_the_token_and_goes_down_when_idle(quick_idle):
    from webapp.services.serving import SERVED_BASE, project_server_request, server_headers

    project = project_factory()
    server, started = project_server_request(project=project, base_model=str(quick_idle))
    assert started and server.status == "starting" and server.starts == 1
    ready = wait_for(lambda: ProjectServer.objects.filter(pk=server.pk, status="ready").first(), timeout=120,
                     message="the server to be ready")
    assert ready.startup_s is not None and 0 < ready.startup_s < 120
    assert ready.worker.startswith("inprocess@") and ready.kind == "local"
    mine = {c.laddr.port for c in psutil.Process(os.getpid()).net_connections(kind="tcp") if c.status == "LISTEN"}
    assert urlsplit(ready.base_url).port not in mine  # a child process listens, not this (the web) process
    listed = httpx.get(f"{ready.base_url}/models", headers=server_headers(), timeout=10)
    assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == [SERVED_BASE]
    assert httpx.get(f"{ready.base_url}/models", timeout=10).status_code == 401  # the deployment's token only
    # Another request while it is up starts nothing and keeps it up.
    again, started_again = project_server_request(project=project, base_model=str(quick_idle))
    assert (again.pk, started_again) == (server.pk, False)
    stopped = wait_for(lambda: ProjectServer.objects.filter(pk=server.pk, status="stopped").first(), timeout=30,
                       message="the idle server to stop")
    assert stopped.stop_reason.startswith("idle for ") and "STUDIO_SERVE_IDLE_S" in stopped.stop_reason
    wait_for(lambda: not _listening(ready.base_url), timeout=20, message="the server process to exit")
    # The next request starts it again.
    restarted, started = project_server_request(project=project, base_model=str(quick_idle))
    assert started and restarted.starts == 2 and restarted.status == "starting"


def test_requests_keep_a_server_up_past_its_idle_time(quick_idle):
    from webapp.services.serving import project_server_request, project_server_touch

    server, _ = project_server_request(project=project_factory(), base_model=str(quick_idle))
    wait_for(lambda: ProjectServer.objects.filter(pk=server.pk, status="ready").exists(), timeout=120,
             message="the server to be ready")
    deadline = timezone.now() + timedelta(seconds=3 * settings.STUDIO_SERVE_IDLE_S)
    while timezone.now() < deadline:  # used every half second for three idle times
        project_server_touch(server_id=server.pk)
        assert ProjectServer.objects.get(pk=server.pk).status == "ready"
        time.sleep(0.5)
    wait_for(lambda: ProjectServer.objects.filter(pk=server.pk, status="stopped").exists(), timeout=30,
             message="the server to stop once unused")


def test_a_server_whose_worker_stopped_beating_is_started_again(settings):
    from webapp.services.serving import project_server_request

    settings.STUDIO_EXECUTOR = "celery"  # nothing consumes the queue here: only the rows are looked at
    project = project_factory()
    old = timezone.now() - timedelta(seconds=settings.STUDIO_STALE_AFTER_S + 5)
    ProjectServer.objects.create(project=project, base_model="m", status="ready", base_url="http://127.0.0.1:9/v1",
                                 worker="celery@gone:1", heartbeat_at=old, last_used_at=old, starts=1)
    server, started = project_server_request(project=project, base_model="m")
    assert started and server.status == "starting" and server.starts == 2 and server.base_url == ""
    assert "stopped sending heartbeats" in server.stop_reason and "celery@gone:1" in server.stop_reason


def test_a_start_no_worker_takes_says_which_queue_needs_one(settings):
    from webapp.selectors.serving import project_server_problem

    project = project_factory()
    server = ProjectServer.objects.create(
        project=project, base_model="m", status="starting",
        requested_at=timezone.now() - timedelta(seconds=settings.STUDIO_SERVE_START_TIMEOUT_S + 1))
    assert "queue `serve`" in project_server_problem(server)
