"""The local inference server's limits, over raw sockets: timeouts for the request head, the body and idle
connections, the body size, the bind rule. One server for the module, with short limits; the contract it shares
with vLLM (including the 400s for `n` and `max_tokens`) is in test_server_contract.py."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.local_server import closed_by_peer, connect, read_response, start_local_server
from training.config import ServerConfig
from training.rl.external import serve_http
from training.servers import InferenceServer
from training.servers.inprocess import InProcessServer
from training.servers.serving import bind_refusal, is_loopback
from training.types import TrainingError

LIMITS = {"header-timeout-s": 1, "body-timeout-s": 1, "keep-alive-s": 1, "max-body-bytes": 4096, "max-n": 4,
          "max-connections": 8}
CHAT = {"model": "base", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceServer]:
    flags = [part for name, value in LIMITS.items() for part in (f"--{name}", str(value))]
    srv = start_local_server(tiny_model_dir, tmp_path_factory.mktemp("limits") / "server.log", *flags)
    yield srv
    srv.stop()


def test_a_kept_alive_connection_serves_requests_and_is_closed_when_idle(server: InferenceServer) -> None:
    sock = connect(server)
    for _ in range(2):
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock)[0] == 200
    assert closed_by_peer(sock, LIMITS["keep-alive-s"] + 3)
    sock.close()


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(server: InferenceServer) -> None:
    sock = connect(server)
    started = time.monotonic()
    head = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    closed = False
    for byte in head:  # each byte well within the keep-alive time, the whole head far beyond the head timeout
        try:
            sock.sendall(bytes([byte]))
        except ConnectionError:
            closed = True
            break
        time.sleep(0.05)
    closed = closed or closed_by_peer(sock, 2)
    sock.close()
    assert closed
    assert time.monotonic() - started < LIMITS["header-timeout-s"] + 4


def test_a_body_that_stops_coming_is_a_408(server: InferenceServer) -> None:
    sock = connect(server)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":")
    status, raw = read_response(sock, timeout_s=LIMITS["body-timeout-s"] + 5)
    assert status == 408
    assert b"connection: close" in raw.lower()
    sock.close()


def test_a_body_over_the_limit_is_a_413_and_the_next_request_is_served(server: InferenceServer) -> None:
    response = httpx.post(f"{server.base_url}/chat/completions", timeout=30,
                          json={**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == 413
    assert httpx.post(f"{server.base_url}/chat/completions", json=CHAT, timeout=30).status_code == 200


def test_beyond_the_connection_cap_a_request_is_a_503_until_the_idle_ones_are_dropped(
        server: InferenceServer) -> None:
    idle = [connect(server) for _ in range(LIMITS["max-connections"])]
    try:
        refused = httpx.get(f"{server.base_url}/models", timeout=30)
        assert refused.status_code == 503
        assert all(closed_by_peer(sock, LIMITS["header-timeout-s"] + 3) for sock in idle)
    finally:
        for sock in idle:
            sock.close()
    assert httpx.get(f"{server.base_url}/models", timeout=30).status_code == 200


def test_n_above_the_servers_maximum_is_a_400(server: InferenceServer) -> None:
    response = httpx.post(f"{server.base_url}/chat/completions", json={**CHAT, "n": 5}, timeout=30)
    assert response.status_code == 400
    assert "at most 4" in response.json()["error"]["message"]
    assert httpx.post(f"{server.base_url}/chat/completions", json={**CHAT, "n": 4}, timeout=30).status_code == 200


def test_unknown_routes_and_malformed_bodies_are_json_errors(server: InferenceServer) -> None:
    missing = httpx.get(f"{server.root_url}/v1/nothing", timeout=30)
    not_json = httpx.post(f"{server.base_url}/chat/completions", content=b"{oops", timeout=30)
    no_name = httpx.post(f"{server.base_url}/load_lora_adapter", json={"lora_path": "/tmp"}, timeout=30)
    assert (missing.status_code, not_json.status_code, no_name.status_code) == (404, 400, 400)
    assert no_name.json()["error"]["param"] == "lora_name"
    assert missing.json()["object"] == "error"


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.5", True), ("localhost", True),
                                            ("::1", True), ("0.0.0.0", False), ("::", False),
                                            ("10.0.0.5", False), ("gpu-worker-0", False)])
def test_only_loopback_hosts_listen_without_a_token(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert (bind_refusal(host, None) is None) is loopback
    assert bind_refusal(host, "a-long-enough-deployment-token") is None
    assert "shorter than" in (bind_refusal(host, "short") or "")


def test_the_server_refuses_another_host_without_a_token_before_loading_the_model(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", "training.servers.local", "--model", str(tmp_path / "absent"),
                             "--host", "0.0.0.0"], capture_output=True, text=True, timeout=120, env=env,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 2
    assert "without authentication" in result.stderr and "STUDIO_INFERENCE_TOKEN" in result.stderr


def test_an_in_process_engines_http_front_follows_the_same_rule(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STUDIO_INFERENCE_TOKEN", raising=False)
    with InProcessServer(str(tiny_model_dir), "base", 8, "cpu") as server:
        with pytest.raises(TrainingError, match="server.host"):
            serve_http(server, "0.0.0.0")
        monkeypatch.setenv("STUDIO_INFERENCE_TOKEN", "a-long-enough-deployment-token")
        base_url, stop = serve_http(server, "127.0.0.1")
        try:
            assert httpx.get(f"{base_url}/models", timeout=30).status_code == 401
            models = httpx.get(f"{base_url}/models", timeout=30,
                               headers={"Authorization": "Bearer a-long-enough-deployment-token"})
            assert [m["id"] for m in models.json()["data"]] == ["base"]
        finally:
            stop()


def test_a_started_server_is_given_the_token_and_sends_it(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from training.servers import start_server

    monkeypatch.setenv("STUDIO_INFERENCE_TOKEN", "a-long-enough-deployment-token")
    with start_server(ServerConfig(kind="local"), str(tiny_model_dir), tmp_path / "server.log") as server:
        assert server.models() == ["base"]  # sent with the token
        with server.client() as client:
            assert client.chat.completions.create(**CHAT).choices
        assert httpx.get(f"{server.base_url}/models", timeout=30).status_code == 401
