"""The pinned transports (egress/transport.py) check each request's host at connection time and connect to the
address they checked: a name rebound after it passed a check (DNS rebinding) and a redirect to a refused address
reach nothing. The resolver is faked at socket.getaddrinfo, outside our code; the servers are real."""
from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from egress import EgressRefused, EgressUnresolvable, Policy, async_client, check_url, failure_detail, sync_client
from tests.egress.http_doubles import CountingServer, rebinding_resolver

NAME = "judge.rebind.test"


def test_a_name_that_passed_the_check_and_is_rebound_to_a_refused_address_reaches_nothing(monkeypatch):
    policy = Policy.from_entries([NAME])
    with CountingServer() as metadata:
        # the check on save sees a public address; every later answer is the loopback "metadata" double
        monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver(NAME, ["8.8.8.8", "127.0.0.1"]))
        url = f"http://{NAME}:{metadata.port}/latest/meta-data/"
        assert check_url(url, Policy())  # passed on save: public
        with sync_client(Policy()) as client, pytest.raises(EgressRefused, match="loopback or private"):
            client.get(url)
        with pytest.raises(EgressRefused, match="never allowed"):
            monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver(NAME, ["169.254.169.254"]))
            asyncio.run(_get_async(policy, url))
        assert metadata.requests == []


async def _get_async(policy: Policy, url: str) -> httpx.Response:
    async with async_client(policy) as client:
        return await client.get(url)


def test_an_allowed_name_is_sent_to_the_checked_address_with_its_own_host_header(monkeypatch):
    with CountingServer(body=b"{}") as server:
        monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver(NAME, ["127.0.0.1"]))
        url = f"http://{NAME}:{server.port}/v1/models"
        with sync_client(Policy.from_entries([NAME])) as client:
            assert client.get(url).status_code == 200
        assert asyncio.run(_get_async(Policy.from_entries([NAME]), url)).status_code == 200
    assert server.requests == [{"path": "/v1/models", "host": f"{NAME}:{server.port}"}] * 2


def test_a_redirect_to_a_refused_address_is_checked_like_the_first_request():
    with CountingServer() as metadata, CountingServer(status=307, body=b"") as judge:
        judge.location = f"{metadata.url}/latest/meta-data/iam/security-credentials/"
        policy = Policy.from_entries([f"127.0.0.1:{judge.port}"])  # the judge's port only
        with sync_client(policy, follow_redirects=True) as client, pytest.raises(EgressRefused):
            client.post(f"{judge.url}/v1/chat/completions", json={})
        with pytest.raises(EgressRefused):
            asyncio.run(_redirected(policy, f"{judge.url}/v1/chat/completions"))
        assert len(judge.requests) == 2 and metadata.requests == []


async def _redirected(policy: Policy, url: str) -> None:
    async with async_client(policy, follow_redirects=True) as client:
        await client.post(url, json={})


def test_a_failed_call_reports_its_status_never_the_body():
    """An SDK's error quotes the reply (here a 500 whose body holds keys); what may be shown is its status."""
    import openai

    with CountingServer(status=500) as server, sync_client(Policy.from_entries(["127.0.0.1"])) as client:
        response = client.get(server.url)
    err = openai.InternalServerError(message=response.text, response=response, body=None)
    assert "SecretAccessKey" in str(err)
    assert failure_detail(err) == "HTTP 500"
    refused = EgressRefused("the host 'x' resolves to 169.254.169.254")
    try:
        try:
            raise refused
        except EgressRefused as inner:
            raise httpx.ConnectError("wrapped") from inner
    except httpx.ConnectError as wrapped:
        assert failure_detail(wrapped) == str(refused)  # the policy's reason, through the client's wrapping


def test_a_name_that_resolves_to_nothing_is_a_failed_connection_not_a_request(monkeypatch):
    def nothing(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", nothing)
    with pytest.raises(EgressUnresolvable):
        check_url("https://judge.nowhere.test/v1", Policy())
    with sync_client(Policy()) as client, pytest.raises(httpx.ConnectError, match="cannot be resolved"):
        client.get("https://judge.nowhere.test/v1")
    with pytest.raises(httpx.ConnectError, match="cannot be resolved"):
        asyncio.run(_get_async(Policy(), "https://judge.nowhere.test/v1"))
