"""The egress policy (egress/): public addresses pass, loopback and private ones only when listed, link-local
(cloud metadata), unspecified, multicast and reserved never; STUDIO_EGRESS_DENY_ALL refuses everything; names are
checked by every address they resolve to."""
from __future__ import annotations

import socket

import pytest

import egress
from egress import EgressRefused, Policy, check_url, policy_from_env
from tests.egress.http_doubles import rebinding_resolver


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/latest/meta-data/",
    "http://[fe80::1]/",
    "http://0.0.0.0:8080/v1",
    "http://[::]/v1",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
])
def test_addresses_no_list_can_open_are_refused_even_under_a_star(url):
    with pytest.raises(EgressRefused, match="never allowed"):
        check_url(url, Policy.from_entries(["*"]))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://[::1]:8000/v1", "http://10.0.0.5/v1",
                                 "http://192.168.1.9/v1", "http://100.64.0.1/v1"])
def test_loopback_and_private_addresses_need_an_entry(url):
    with pytest.raises(EgressRefused, match="STUDIO_EGRESS_ALLOWED_HOSTS or STUDIO_MCP_ALLOWED_HOSTS lists it"):
        check_url(url, Policy())
    assert check_url(url, Policy.from_entries(["*"]))


def test_a_public_address_passes_without_an_entry_and_returns_what_was_checked():
    assert [str(a) for a in check_url("https://8.8.8.8/v1", Policy())] == ["8.8.8.8"]


def test_deny_all_refuses_public_addresses_too():
    with pytest.raises(EgressRefused, match="STUDIO_EGRESS_DENY_ALL is set"):
        check_url("https://8.8.8.8/v1", Policy.from_entries(["*"], deny_all=True))


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1/", "http:///v1", "http://h:99999/"])
def test_what_is_not_an_http_url_with_a_host_is_refused(url):
    with pytest.raises(EgressRefused):
        check_url(url, Policy.from_entries(["*"]))


def test_a_name_is_checked_by_every_address_it_resolves_to(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver("judge.example.test", ["10.1.2.3"]))
    with pytest.raises(EgressRefused, match="10.1.2.3"):
        check_url("https://judge.example.test/v1", Policy())
    assert check_url("https://judge.example.test/v1", Policy.from_entries(["judge.example.test:443"]))
    monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver("meta.example.test", ["169.254.169.254"]))
    with pytest.raises(EgressRefused, match="never allowed"):
        check_url("http://meta.example.test/", Policy.from_entries(["meta.example.test"]))


def test_the_environment_gives_the_policy_with_the_older_mcp_variable_merged_in():
    loopback = "http://127.0.0.1:9/v1"
    assert check_url(loopback, policy_from_env({}))  # nothing set: a person's own machine, loopback allowed
    with pytest.raises(EgressRefused):
        check_url(loopback, policy_from_env({"STUDIO_EGRESS_ALLOWED_HOSTS": ""}))
    assert check_url(loopback, policy_from_env({"STUDIO_EGRESS_ALLOWED_HOSTS": "", "STUDIO_MCP_ALLOWED_HOSTS":
                                                "127.0.0.1"}))
    assert check_url("http://10.0.0.9/", policy_from_env({"STUDIO_EGRESS_ALLOWED_HOSTS": "10.0.0.0/8"}))
    with pytest.raises(EgressRefused, match="DENY_ALL"):
        check_url("http://8.8.8.8/", policy_from_env({"STUDIO_EGRESS_DENY_ALL": "1"}))


@pytest.mark.parametrize("env, says", [
    ({"STUDIO_EGRESS_ALLOWED_HOSTS": "169.254.169.254"}, "STUDIO_EGRESS_ALLOWED_HOSTS entry '169.254.169.254'"),
    ({"STUDIO_MCP_ALLOWED_HOSTS": "fe80::/10"}, "STUDIO_MCP_ALLOWED_HOSTS entry 'fe80::/10'"),
    ({"STUDIO_EGRESS_DENY_ALL": "maybe"}, "STUDIO_EGRESS_DENY_ALL must be 1 or 0"),
])
def test_a_bad_variable_is_refused_by_name(env, says):
    with pytest.raises(ValueError, match=says):
        policy_from_env(env)


def test_an_installed_policy_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("STUDIO_EGRESS_ALLOWED_HOSTS", "*")
    previous = egress.policy._installed
    try:
        egress.install_policy(Policy(deny_all=True))
        with pytest.raises(EgressRefused, match="DENY_ALL"):
            check_url("http://10.0.0.1/")
        egress.install_policy(None)
        assert check_url("http://10.0.0.1/")
    finally:
        egress.install_policy(previous)
