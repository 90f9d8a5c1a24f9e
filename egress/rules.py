"""The allow-list's entries as rules, and which addresses no entry can open.

Entries, comma-separated (docs/security.md, Outbound addresses):
  `*`                     any host that is not refused outright (private and loopback included)
  `judge.internal[:8443]` that host name, on any port or on that port
  `*.corp.example[:443]`  any subdomain of corp.example
  `10.0.0.5[:8765]`, `[::1]:8765`   that address
  `10.0.0.0/8`            any address in that network
Link-local (169.254/16, fe80::/10: the cloud metadata endpoints live there), unspecified, multicast and reserved
addresses are refused whatever the list says, and an entry naming one is a ValueError (the process stops at start).
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAME = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
NEVER = ("link-local, unspecified, multicast and reserved addresses are never allowed (the cloud metadata "
         "endpoints live at 169.254.169.254)")


@dataclass(frozen=True)
class HostRule:
    name: str | None = None  # "judge.internal", "*.corp.example", or "*" (any host)
    network: IpNetwork | None = None
    port: int | None = None  # None: any port

    def matches(self, host: str, addresses: list[IpAddress], port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return bool(addresses) and all(a in self.network for a in addresses)
        if self.name == "*":
            return True
        if self.name and self.name.startswith("*."):
            return host.endswith(self.name[1:])
        return host == self.name


def refused_outright(address: IpAddress | IpNetwork) -> bool:
    """Never reachable, whatever the deployment lists. ::1 lies in IPv6's reserved ::/8: loopback is a private
    address, not a refused one."""
    return address.is_link_local or address.is_unspecified or address.is_multicast or (
        address.is_reserved and not address.is_loopback)


def plain(address: IpAddress) -> IpAddress:
    """::ffff:169.254.169.254 is 169.254.169.254 (Python 3.11 does not see the mapped form as link-local)."""
    return getattr(address, "ipv4_mapped", None) or address


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [v6] or [v6]:port
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError("write an IPv6 address as [::1] or [::1]:8765")
        return host, int(rest[1:]) if rest else None
    if entry.count(":") == 1:
        host, port = entry.split(":")
        if not port.isdigit():
            raise ValueError("expected a host name, *.domain, an IP address, or a network like 10.0.0.0/8, each "
                             "with an optional :port (a number)")
        return host, int(port)
    return entry, None


def _rule(entry: str) -> HostRule:
    if entry == "*":
        return HostRule(name="*")
    if "/" in entry:
        network = ipaddress.ip_network(entry, strict=False)
        link_local = ipaddress.ip_network("169.254.0.0/16" if network.version == 4 else "fe80::/10")
        if refused_outright(network) or network.overlaps(link_local):
            raise ValueError(NEVER)
        return HostRule(network=network)
    host, port = _split_port(entry)
    if port is not None and not 0 < port < 65536:
        raise ValueError("a port is a number from 1 to 65535")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if not _NAME.match(host):
            raise ValueError("expected a host name, *.domain, an IP address, or a network like 10.0.0.0/8, each "
                             "with an optional :port") from None
        return HostRule(name=host, port=port)
    address = plain(address)
    if refused_outright(address):
        raise ValueError(NEVER)
    return HostRule(network=ipaddress.ip_network(address), port=port)


def parse_host_rules(entries: list[str], *, name: str = "STUDIO_EGRESS_ALLOWED_HOSTS") -> list[HostRule]:
    """The entries as rules; ValueError naming the variable and the bad entry."""
    rules = []
    for raw in entries:
        if not raw.strip():
            continue
        try:
            rules.append(_rule(raw.strip().lower()))
        except ValueError as err:
            raise ValueError(f"{name} entry {raw.strip()!r}: {err}") from None
    return rules
