"""Which MCP server URLs may be reached: the egress policy (egress/, docs/security.md "Outbound addresses") under
its MCP names, kept for the callers and the older variable STUDIO_MCP_ALLOWED_HOSTS, which is merged into
STUDIO_EGRESS_ALLOWED_HOSTS. Pure Python (no Django), so settings.py can parse the variables at start."""
from __future__ import annotations

import egress
from egress import HostRule, IpAddress, Policy

__all__ = ["HostRule", "McpHostNotAllowed", "check_url_allowed", "parse_host_rules"]


class McpHostNotAllowed(egress.EgressRefused):
    """The URL's host is not one the deployment may reach; the message says why and what to set."""


def parse_host_rules(entries: list[str], *, name: str = "STUDIO_MCP_ALLOWED_HOSTS") -> list[HostRule]:
    return egress.parse_host_rules(entries, name=name)


def check_url_allowed(url: str, rules: list[HostRule] | Policy) -> list[IpAddress]:
    """McpHostNotAllowed unless a request to `url` may be sent; the addresses checked otherwise."""
    policy = rules if isinstance(rules, Policy) else Policy(rules=tuple(rules))
    try:
        return egress.check_url(url, policy)
    except egress.EgressRefused as err:
        raise McpHostNotAllowed(str(err)) from None
