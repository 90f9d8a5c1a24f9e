"""The egress policy: which addresses a request to a member-given URL may go to, and the check itself.

A URL passes when every address its host resolves to is public (globally routable), or when the deployment's
list opens it (loopback, private, shared addresses need an entry); link-local (cloud metadata), unspecified,
multicast and reserved addresses never pass. `STUDIO_EGRESS_DENY_ALL=1` refuses every address, public ones too.
`check_url` returns the addresses it checked, so that the connection goes to one of them and a name cannot be
rebound between the check and the connection (the pinned transports in egress.transport do this per request).

Where the policy comes from: a process that knows its deployment's settings (the web app) installs it
(`install_policy`); any other process (the engine child, a worker's probe, the CLIs) reads its environment
(`policy_from_env`): STUDIO_EGRESS_ALLOWED_HOSTS, with STUDIO_MCP_ALLOWED_HOSTS (the older, MCP-only name) merged
in, and STUDIO_EGRESS_DENY_ALL. With neither list variable set, loopback is allowed: a person running the engine
on their own machine reaches their own servers, as the web app's embedded default does.
"""
from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

from egress.rules import HostRule, IpAddress, parse_host_rules, plain, refused_outright

ALLOWED_ENV = "STUDIO_EGRESS_ALLOWED_HOSTS"
MCP_ALLOWED_ENV = "STUDIO_MCP_ALLOWED_HOSTS"  # the older name, merged in
DENY_ALL_ENV = "STUDIO_EGRESS_DENY_ALL"
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


class EgressRefused(ValueError):
    """The URL's host is not one this deployment may send a request to; the message says why and what to set."""


class EgressUnresolvable(EgressRefused):
    """The host resolves to no address now: nothing can be checked, so nothing is sent. Where a later connection
    checks again (a saved judge's address), a caller may let this pass; at a connection it is a connect error."""


@dataclass(frozen=True)
class Policy:
    rules: tuple[HostRule, ...] = ()
    deny_all: bool = False

    @classmethod
    def from_entries(cls, entries: list[str], *, deny_all: bool = False, name: str = ALLOWED_ENV) -> "Policy":
        return cls(rules=tuple(parse_host_rules(entries, name=name)), deny_all=deny_all)


def _env_entries(value: str | None) -> list[str]:
    return [e.strip() for e in (value or "").split(",") if e.strip()]


def policy_from_env(environ: Mapping[str, str] | None = None) -> Policy:
    """The policy of a process that has no settings of its own; ValueError naming a bad variable."""
    env = os.environ if environ is None else environ
    deny = (env.get(DENY_ALL_ENV) or "").strip().lower()
    if deny not in ("", "0", "1", "true", "false", "yes", "no", "on", "off"):
        raise ValueError(f"{DENY_ALL_ENV} must be 1 or 0, not {deny!r}")
    if ALLOWED_ENV not in env and MCP_ALLOWED_ENV not in env:
        entries = list(LOOPBACK)
    else:
        entries = _env_entries(env.get(ALLOWED_ENV))
        parse_host_rules(entries, name=ALLOWED_ENV)
        mcp = _env_entries(env.get(MCP_ALLOWED_ENV))
        parse_host_rules(mcp, name=MCP_ALLOWED_ENV)
        entries += mcp
    return Policy.from_entries(entries, deny_all=deny in ("1", "true", "yes", "on"))


_installed: Policy | None = None


def install_policy(policy: Policy | None) -> None:
    """Makes `policy` the one this process's outbound calls use (None: back to the environment's)."""
    global _installed
    _installed = policy


def current_policy() -> Policy:
    return _installed if _installed is not None else policy_from_env()


def resolve(host: str, port: int) -> list[IpAddress]:
    """Every address `host` resolves to (an IP literal is itself), deduplicated and sorted."""
    try:
        return [plain(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise EgressUnresolvable(f"the host {host!r} cannot be resolved ({err})") from None
    # "fe80::1%eth0": the zone is not part of the address
    return sorted({plain(ipaddress.ip_address(str(info[4][0]).split("%")[0])) for info in infos}, key=str)


def check_host(host: str, port: int, policy: Policy) -> list[IpAddress]:
    """The addresses `host` resolves to, when a request to host:port may go there; EgressRefused otherwise."""
    host = host.strip("[]").rstrip(".").lower()
    if policy.deny_all:
        raise EgressRefused(f"{DENY_ALL_ENV} is set: this deployment sends no request to an address a project "
                            f"gives ({host!r} included)")
    addresses = resolve(host, port)
    if not addresses:
        raise EgressUnresolvable(f"the host {host!r} resolves to no address")
    if bad := [a for a in addresses if refused_outright(a)]:
        raise EgressRefused(f"the host {host!r} resolves to {bad[0]}, a link-local, unspecified, multicast or "
                            "reserved address (such as a cloud metadata endpoint): never allowed")
    if all(a.is_global for a in addresses) or any(rule.matches(host, addresses, port) for rule in policy.rules):
        return addresses
    shown = ", ".join(map(str, addresses[:3]))
    shown_host = f"[{host}]" if ":" in host else host
    raise EgressRefused(f"the host {host!r} ({shown}) is a loopback or private address, which this deployment "
                        f"may reach only when {ALLOWED_ENV} or {MCP_ALLOWED_ENV} lists it (e.g. {shown_host}:{port})")


def url_host_port(url: str) -> tuple[str, int]:
    """(host, port) of an http(s) URL, the default port filled in; EgressRefused for anything else."""
    parts = urlsplit(url or "")
    try:
        host, port = (parts.hostname or "").rstrip(".").lower(), parts.port
    except ValueError:
        raise EgressRefused(f"the URL {url!r} has an invalid port") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise EgressRefused(f"the URL {url!r} is not an http:// or https:// address with a host")
    return host, port or (443 if parts.scheme.lower() == "https" else 80)


def check_url(url: str, policy: Policy | None = None) -> list[IpAddress]:
    """Raises EgressRefused unless a request to `url` may be sent; returns the addresses it checked (names are
    checked by every address they resolve to, so a public name pointing at a private address is refused)."""
    host, port = url_host_port(url)
    return check_host(host, port, current_policy() if policy is None else policy)
