"""Which MCP server URLs the web process may reach (STUDIO_MCP_ALLOWED_HOSTS): a guard against server-side
request forgery through "Test connection", where a project editor makes the web server send a request.

Without an entry, a URL is allowed only when every address its host resolves to is public (globally routable).
Loopback, private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10) addresses need an entry. Link-local
(169.254/16, fe80::/10: the cloud metadata endpoints live there), unspecified, multicast and reserved addresses
are refused whatever the list says, and an entry naming one stops the process at start.

Entries, comma-separated (docs/mcp.md, Security):
  `*`                     any host that is not refused outright (private and loopback included)
  `mcp.internal[:8443]`   that host name, on any port or on that port
  `*.corp.example[:443]`  any subdomain of corp.example
  `10.0.0.5[:8765]`, `[::1]:8765`   that address
  `10.0.0.0/8`            any address in that network
Pure Python (no Django), so settings.py can parse the variable at start and fail loudly.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAME = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


class McpHostNotAllowed(ValueError):
    """The URL's host is not one the web process may reach; the message says why and what to set."""


@dataclass(frozen=True)
class HostRule:
    name: str | None = None  # "mcp.internal", "*.corp.example", or "*" (any host)
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


def _refused_outright(address: IpAddress | IpNetwork) -> bool:
    # ::1 lies in IPv6's reserved ::/8: loopback is a private address, not a refused one
    return address.is_link_local or address.is_unspecified or address.is_multicast or (
        address.is_reserved and not address.is_loopback)


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


def parse_host_rules(entries: list[str], *, name: str = "STUDIO_MCP_ALLOWED_HOSTS") -> list[HostRule]:
    """The entries as rules; ValueError naming the variable and the bad entry."""
    rules = []
    for raw in entries:
        entry = raw.strip().lower()
        try:
            if entry == "*":
                rules.append(HostRule(name="*"))
                continue
            if "/" in entry:
                network = ipaddress.ip_network(entry, strict=False)
                link_local = ipaddress.ip_network("169.254.0.0/16" if network.version == 4 else "fe80::/10")
                if _refused_outright(network) or network.overlaps(link_local):
                    raise ValueError("link-local, unspecified, multicast and reserved addresses are never allowed "
                                     "(the cloud metadata endpoints live at 169.254.169.254)")
                rules.append(HostRule(network=network))
                continue
            host, port = _split_port(entry)
            if port is not None and not 0 < port < 65536:
                raise ValueError("a port is a number from 1 to 65535")
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                if not _NAME.match(host):
                    raise ValueError("expected a host name, *.domain, an IP address, or a network like "
                                     "10.0.0.0/8, each with an optional :port") from None
                rules.append(HostRule(name=host, port=port))
                continue
            address = _plain(address)
            if _refused_outright(address):
                raise ValueError("link-local, unspecified, multicast and reserved addresses are never allowed "
                                 "(the cloud metadata endpoints live at 169.254.169.254)")
            rules.append(HostRule(network=ipaddress.ip_network(address), port=port))
        except ValueError as err:
            raise ValueError(f"{name} entry {raw.strip()!r}: {err}") from None
    return rules


def _plain(address: IpAddress) -> IpAddress:
    """::ffff:169.254.169.254 is 169.254.169.254 (Python 3.11 does not see it as link-local)."""
    return getattr(address, "ipv4_mapped", None) or address


def _resolve(host: str, port: int) -> list[IpAddress]:
    try:
        return [_plain(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise McpHostNotAllowed(f"the host {host!r} cannot be resolved ({err})") from None
    # "fe80::1%eth0": the zone is not part of the address
    return sorted({_plain(ipaddress.ip_address(str(info[4][0]).split("%")[0])) for info in infos}, key=str)


def check_url_allowed(url: str, rules: list[HostRule]) -> list[IpAddress]:
    """Raises McpHostNotAllowed unless the web process may send a request to `url`; returns the addresses it
    checked, so that the connection goes to one of them (no second lookup a name could be rebound between).
    Resolves the host (names are checked by every address they resolve to, so a public name pointing at a private
    address is refused)."""
    parts = urlsplit(url)
    try:
        host, port = (parts.hostname or "").rstrip(".").lower(), parts.port
    except ValueError:
        raise McpHostNotAllowed(f"the URL {url!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not host:
        raise McpHostNotAllowed(f"the URL {url!r} is not an http:// or https:// address with a host")
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = _resolve(host, port)
    if not addresses:
        raise McpHostNotAllowed(f"the host {host!r} resolves to no address")
    if bad := [a for a in addresses if _refused_outright(a)]:
        raise McpHostNotAllowed(f"the host {host!r} resolves to {bad[0]}, a link-local, unspecified, multicast or "
                             "reserved address (such as a cloud metadata endpoint): never allowed")
    if all(a.is_global for a in addresses):
        return addresses
    if any(rule.matches(host, addresses, port) for rule in rules):
        return addresses
    shown = ", ".join(map(str, addresses[:3]))
    raise McpHostNotAllowed(f"the host {host!r} ({shown}) is a loopback or private address, which the web server "
                         f"may reach only when STUDIO_MCP_ALLOWED_HOSTS lists it (e.g. {host}:{port})")
