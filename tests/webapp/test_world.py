"""The tests' one world (tests/webapp/world.py): one served app kept for the next test only when a test left
nothing running in it, and one readiness wait that fails at once, saying why, when the server died."""
from __future__ import annotations

import errno
import socket
import subprocess
import sys
import time

import pytest
import requests

from tests.ports import closed_port
from tests.webapp.factories import run_factory
from tests.webapp.world import AppWorld, free_port, listening, wait_listening
from webapp.models import RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_server_that_exits_before_listening_fails_the_wait_at_once_with_its_log(tmp_path):
    log = tmp_path / "server.log"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('no settings module'); sys.exit(3)"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)exited with 3 before listening.*no settings module"):
        wait_listening(port, proc=proc, log=log, timeout=60, what="the doomed server")
    assert time.monotonic() - started < 30  # not the whole timeout
    assert not listening(port)


def test_a_port_that_another_process_listens_on_does_not_count_as_the_server_being_up():
    """A port found free can be handed out again before the server binds it (another worker's server, a judge
    double): a connect succeeds, but to them. Only the server's own listening socket counts."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        never_listens = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            with pytest.raises(AssertionError, match="timed out after 3 s waiting for the late server"):
                wait_listening(port, proc=never_listens, timeout=3, what="the late server")
        finally:
            never_listens.kill()
            never_listens.wait()


def test_the_closed_port_refuses_a_connection_at_once_and_no_other_process_can_take_it():
    """An address that must lead nowhere (a judge that is down) stays so: a port found free and let go could be
    bound by a server started later, and the 'down' judge would answer."""
    port = closed_port()
    assert closed_port() == port  # one per process
    with socket.socket() as client:
        client.settimeout(5)
        assert client.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
    bind = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "try: s.bind(('127.0.0.1', int(sys.argv[1])))\nexcept OSError as e: sys.exit(e.errno)")
    assert subprocess.run([sys.executable, "-c", bind, str(port)], timeout=60).returncode == errno.EADDRINUSE
    assert subprocess.run([sys.executable, "-c", bind, str(free_port())], timeout=60).returncode == 0


def test_the_served_app_is_kept_for_the_next_test_only_when_nothing_was_left_running_in_it(tmp_path, monkeypatch):
    world = AppWorld(tmp_path)
    try:
        first = world.serve(None)
        assert requests.get(f"{first.url}/login/", timeout=30).status_code == 200
        world.after_test()  # nothing running: kept
        assert world.serve(None) is first and first.proc.poll() is None and world.starts == 1
        monkeypatch.setenv("STUDIO_JUDGE_KEY_ENDPOINTS", '{"JUDGE_DOUBLE_API_KEY": ["http://127.0.0.1:9/v1"]}')
        own = world.serve(None)  # a test's own environment (its judge double's key policy): a daphne of its own
        assert own is not first and first.proc.poll() is not None and world.starts == 2
        scripted = world.serve("tests.webapp.scripted_engine:train")  # other settings: another daphne
        assert scripted is not own and own.proc.poll() is not None and world.starts == 3
        run_factory(status=RunStatus.RUNNING)  # a test that leaves a run active in it
        world.after_test()
        assert world.served is None and scripted.proc.poll() is not None
        assert not listening(scripted.port)
    finally:
        world.stop()
