"""Which URLs a remote caller may push: no loopback, link-local or private-range targets.

``POST .../requests`` lets anyone holding the token make the engine fetch a URL;
without this check that is a path into the services next to the engine (a
metadata endpoint, an admin page on 127.0.0.1). A spider whose ``allowed_domains``
names such a host, or whose ``allow_private_targets`` setting is on, still gets it.

The decision is made on the host as the fetch will use it (``fetch_host``):
percent-decoded, mapped by IDNA/UTS 46 (fullwidth digits and letters, ``。``,
circled digits all become ASCII, as they do in the URL library that connects),
lower-cased, trailing dots dropped. Host names are not resolved (no DNS traffic on
behalf of a caller): a name is refused only if it is ``localhost`` or under
``.localhost``; an address literal in any form a resolver accepts (``127.1``,
``0x7f000001``, ``[::1]``) is checked.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(host: str) -> IPAddress | None:
    """The address ``host`` stands for when it is a literal (legacy IPv4 forms included)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:  # inet_aton is what getaddrinfo applies: "127.1", "2130706433", "0x7f.1"
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except (OSError, ValueError):
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def fetch_host(host: str) -> str:
    """``host`` (a URL's, brackets removed) as the fetch resolves it; see the module doc."""
    host = unquote(host, errors="strict")
    try:
        host = idna.uts46_remap(host, std3_rules=False, transitional=False)
    except idna.IDNAError:
        host = host.lower()  # not mappable: the fetch refuses it, the check sees it as is
    return host.rstrip(".")


def _internal(address: IPAddress) -> bool:
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_private
        or address.is_unspecified
        or address.is_reserved
        or address.is_multicast
    )


def private_target(url: str, allowed_domains: Sequence[str]) -> str | None:
    """Why ``url`` points inside the engine's network, or None when it does not (or when
    ``allowed_domains`` names its host exactly)."""
    try:
        host = fetch_host(urlsplit(url).hostname or "")
    except ValueError:  # UnicodeDecodeError too
        return None  # not a URL at all: the scheduler says why
    if host in {fetch_host(d).strip(".") for d in allowed_domains}:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host!r} is this machine: name it in allowed_domains or allow_private_targets"
    address = _address(host)
    if address is not None and _internal(address):
        return (
            f"{address} is a loopback, link-local or private address: "
            "name it in allowed_domains or set allow_private_targets"
        )
    return None
