"""The local inference server attacked as a client on its network would: slow connections, huge bodies, parameters
out of range, no token. One server for the module, started as a deployment with a token starts it: listening on
every interface (which the token allows) with a short request-head timeout so the test need not wait long.
Each of these answered differently on the stdlib `http.server` it replaced (issue 33, item 8)."""
from __future__ import annotations

import json
import secrets
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.local_server import (closed_by_peer, connect, read_response, server_rss_bytes, server_threads,
                                start_local_server)
from training.config import ServerConfig
from training.servers import InferenceServer, start_server
from training.types import TrainingError

TOKEN = secrets.token_urlsafe(24)
HEADER_TIMEOUT_S = 2
MAX_BODY = 1024 * 1024
CHAT = {"model": "base", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceServer]:
    log = tmp_path_factory.mktemp("local-server") / "server.log"
    srv = start_local_server(tiny_model_dir, log, "--header-timeout-s", str(HEADER_TIMEOUT_S),
                             "--max-body-bytes", str(MAX_BODY), "--max-n", "16", host="0.0.0.0", token=TOKEN)
    yield srv
    srv.stop()


def authorized() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_a_hundred_half_open_requests_hold_no_thread_and_are_dropped(server: InferenceServer) -> None:
    threads_before = server_threads(server)
    slow = [connect(server) for _ in range(100)]
    for sock in slow:  # a request head that never ends
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application")
    time.sleep(0.5)
    started = time.monotonic()
    response = httpx.post(f"{server.base_url}/chat/completions", json=CHAT, headers=authorized(), timeout=30)
    answered_s = time.monotonic() - started
    assert response.status_code == 200
    assert answered_s < 10, f"a normal request waited {answered_s:.1f} s behind 100 half-open ones"
    assert server_threads(server) - threads_before < 10  # http.server: one thread per connection
    dropped = [closed_by_peer(sock, HEADER_TIMEOUT_S + 5) for sock in slow]
    for sock in slow:
        sock.close()
    assert all(dropped), f"{dropped.count(False)} of 100 half-open connections still open"


def test_a_200_mb_body_is_refused_at_its_declared_length_without_being_read(server: InferenceServer) -> None:
    rss_before = server_rss_bytes(server)
    sock = connect(server)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {TOKEN}\r\nContent-Length: {200 * 1024 * 1024}\r\n\r\n".encode())
    sent, status, chunk = 0, None, b"x" * 65536
    select.select([sock], [], [], 2)  # a moment for an answer to the head alone, then the body regardless
    try:
        while sent < 200 * 1024 * 1024:  # the whole body, unless the server answers first
            if status is None and select.select([sock], [], [], 0)[0]:
                status = read_response(sock)[0]  # and on sending: the server must not take the rest
            sock.sendall(chunk)
            sent += len(chunk)
        else:
            status = status or read_response(sock)[0]
    except ConnectionError:
        pass  # the server closed the connection on the rest of the body
    finally:
        sock.close()
    assert status == 413
    assert sent < 32 * 1024 * 1024, f"the server took {sent >> 20} MiB of a body it refused"
    assert server_rss_bytes(server) - rss_before < 50 * 1024 * 1024


def test_a_streamed_body_past_the_limit_is_refused_as_it_passes(server: InferenceServer) -> None:
    rss_before = server_rss_bytes(server)
    sock = connect(server)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode())
    piece = b"x" * 65536
    sent, status = 0, None
    try:
        while sent < 200 * 1024 * 1024:  # a body that never ends, unless the server ends it
            if select.select([sock], [], [], 0.05)[0]:
                status = read_response(sock)[0]
                break
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
    except ConnectionError:
        pass
    finally:
        sock.close()
    assert status == 413
    assert sent < 8 * MAX_BODY
    assert server_rss_bytes(server) - rss_before < 50 * 1024 * 1024


@pytest.mark.parametrize("change, param", [
    ({"n": 10_000}, "n"), ({"n": 0}, "n"), ({"max_tokens": -5}, "max_tokens"), ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 10**6}, "max_tokens"), ({"temperature": float("nan")}, "temperature"),
    ({"top_p": float("inf")}, "top_p"), ({"n": "all"}, "n"),
])
def test_parameters_out_of_range_are_400s_that_name_them(server: InferenceServer, change: dict, param: str) -> None:
    body = json.dumps({**CHAT, **change}).encode()  # NaN and Infinity as Python's json writes them
    response = httpx.post(f"{server.base_url}/chat/completions", content=body, timeout=30,
                          headers={**authorized(), "Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert f"`{param}`" in error["message"]


@pytest.mark.parametrize("method, route", [("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                                           ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter"),
                                           ("GET", "/health")])
def test_without_the_token_every_route_is_401(server: InferenceServer, method: str, route: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, {"Authorization": TOKEN}):
        response = httpx.request(method, f"{server.root_url}{route}", json=CHAT, headers=headers, timeout=30)
        assert response.status_code == 401, (headers, response.text)


def test_an_adapter_cannot_be_loaded_without_the_token(server: InferenceServer, tiny_model_dir: Path,
                                                        tmp_path: Path) -> None:
    from training.config import GRPOConfig, LoraConfig
    from training.rl.trainer import Trainer

    # The attacker's adapter: a valid one, which the server loads for whoever has the token.
    Trainer(str(tiny_model_dir), LoraConfig(), GRPOConfig(), seed=0).save(tmp_path / "mine", {"step": 1})
    load = {"lora_name": "mine", "lora_path": str(tmp_path / "mine")}
    refused = httpx.post(f"{server.base_url}/load_lora_adapter", json=load, timeout=30)
    assert refused.status_code == 401
    assert server.models() == ["base"]  # asked with the token
    server.load_adapter("mine", tmp_path / "mine")  # with it: the same request is served
    try:
        assert server.models() == ["base", "mine"]
    finally:
        server.unload_adapter("mine")


def own_address() -> str | None:
    """This machine's address on its network (the interface a datagram would leave by; nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_with_the_token_the_server_answers_on_every_interface(server: InferenceServer) -> None:
    # Listening on 0.0.0.0: reached by this machine's network address, not only by loopback.
    address = own_address()
    if address is None:
        pytest.skip("this machine has no network interface but loopback")
    url = f"http://{address}:{server.root_url.rsplit(':', 1)[1]}/v1/models"
    assert httpx.get(url, headers=authorized(), timeout=30).status_code == 200
    assert httpx.get(url, timeout=30).status_code == 401


def test_without_a_token_a_server_on_another_host_is_refused_at_start(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a run config or an override that says server.host: 0.0.0.0 would ask; nothing is started.
    monkeypatch.delenv("STUDIO_INFERENCE_TOKEN", raising=False)
    for kind in ("local", "vllm"):
        with pytest.raises(TrainingError, match="without authentication.*STUDIO_INFERENCE_TOKEN"):
            start_server(ServerConfig(kind=kind, host="0.0.0.0", python="/nonexistent"), str(tiny_model_dir),
                         tmp_path / "server.log")
    assert not (tmp_path / "server.log").exists()
