"""One egress policy for every outbound address a project member gives (judge and teacher API bases, the
scenario generator's judge, MCP servers): checked when it is saved and again at each connection, which goes to
the address that was checked. Pure Python (stdlib + httpx): the web app, judging and training all import it, and
it imports none of them.

    egress.check_url(url)                  # -> the checked addresses, or EgressRefused saying why
    egress.async_client()                  # an httpx client that checks and pins every request
    egress.policy_from_env() / install_policy(policy)   # where the policy comes from (egress/policy.py)
"""
from __future__ import annotations

from egress.policy import (ALLOWED_ENV, DENY_ALL_ENV, LOOPBACK, MCP_ALLOWED_ENV, EgressRefused, EgressUnresolvable,
                           Policy,
                           check_host, check_url, current_policy, install_policy, policy_from_env, resolve,
                           url_host_port)
from egress.failures import egress_refusal, failure_chain, failure_detail
from egress.rules import HostRule, IpAddress, parse_host_rules, refused_outright
from egress.transport import PinnedAsyncTransport, PinnedTransport, async_client, sync_client

__all__ = ["ALLOWED_ENV", "DENY_ALL_ENV", "LOOPBACK", "MCP_ALLOWED_ENV", "EgressRefused", "EgressUnresolvable",
           "HostRule", "IpAddress",
           "PinnedAsyncTransport", "PinnedTransport", "Policy", "async_client", "check_host", "check_url",
           "current_policy", "egress_refusal", "failure_chain", "failure_detail", "install_policy",
           "parse_host_rules", "policy_from_env", "refused_outright", "resolve", "sync_client", "url_host_port"]
