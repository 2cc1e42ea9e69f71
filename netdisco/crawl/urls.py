"""URLs as browsers read them: resolution, validity, canonical form, origin.

One owner for URL parsing: everything is parsed by ada (``ada_url``), a parser of the
WHATWG URL Standard (the one Node.js uses), so a link resolves to what a browser
fetches: backslashes read as slashes in http(s), tabs and newlines removed, hosts
through IDNA (fullwidth letters folded, zero-width characters dropped), IPv4 in any
of its forms (``192.168.257``) written dotted, default ports dropped, percent
escapes kept as written (``%2F`` is not ``/``, ``%7E`` is not ``~``).

The canonical form (what fingerprints hash) merges on purpose what the standard
keeps apart only where one page is meant: the fragment is dropped, the query's
``&``-separated parts are sorted (an empty query, ``/b?``, is none), and a host's
trailing dot is removed.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ada_url import HostType, idna_to_ascii
from ada_url._ada_wrapper import ffi, lib  # type: ignore[import-not-found]

#: the ports the standard leaves out of a URL (the only schemes netdisco fetches)
DEFAULT_PORTS = {"http": 80, "https": 443}

#: ada's "no such component" offset, and its host type of a domain (not an address)
_OMITTED = 0xFFFFFFFF
_DOMAIN = int(HostType.DEFAULT)
_IPV6 = int(HostType.IPV6)


class Parsed(NamedTuple):
    """What netdisco needs of a parsed URL, read once through ada's C API: its
    ``URL`` class costs about 2 us an attribute, more than the parse itself."""

    href: str
    scheme: str
    host: str  # ASCII, without brackets or trailing dot
    port: int | None  # as written (None: the default)
    host_type: int
    canonical: str


def resolve(base: str, url: str) -> str:
    """``url`` resolved against ``base`` as the URL Standard says; ValueError if it
    does not parse (``http://[oops``, a relative URL on a base that has no path)."""
    data, base_data = url.encode(), base.encode()
    obj = lib.ada_parse_with_base(data, len(data), base_data, len(base_data))
    try:
        if not lib.ada_is_valid(obj):
            raise ValueError("not a URL by the URL Standard")
        return _text(lib.ada_get_href(obj))
    finally:
        lib.ada_free(obj)


def _text(value: object) -> str:
    """An ada string (pointer and length; ASCII for a serialised URL's parts)."""
    return ffi.unpack(value.data, value.length).decode() if value.length else ""  # type: ignore[attr-defined]


@lru_cache(maxsize=16384)  # about 6 MB: most links on a site point at few pages
def parse(url: str) -> Parsed | None:
    """``url`` parsed by the standard (None if it does not parse), with its canonical form."""
    data = url.encode()
    obj = lib.ada_parse(data, len(data))
    try:
        if not lib.ada_is_valid(obj):
            return None
        href = _text(lib.ada_get_href(obj))
        host_type = lib.ada_get_host_type(obj)
        c = lib.ada_get_components(obj)
        marks = (c.protocol_end, c.host_start, c.host_end, c.port, c.search_start, c.hash_start)
    finally:
        lib.ada_free(obj)
    protocol_end, host_start, host_end, port, search, fragment = marks
    canonical = _canonical(href, host_end if host_type == _DOMAIN else 0, search, fragment)
    host = href[host_start:host_end].lstrip("@").strip("[]").rstrip(".")  # after credentials
    scheme, port_number = href[: protocol_end - 1], None if port == _OMITTED else port
    return Parsed(href, scheme, host, port_number, host_type, canonical)


def host_key(url: str) -> str:
    """``host[:port]`` as the standard serialises it (IDNA, lower case, default port
    and credentials left out, IPv6 in brackets, no trailing dot): one key per host, so that
    ``http://Example.test:80/`` and ``http://example.test/x`` share one politeness slot
    and one robots.txt. A URL that does not parse keys on itself (it is never fetched)."""
    parsed = parse(url)
    if parsed is None:
        return url
    host = f"[{parsed.host}]" if parsed.host_type == _IPV6 else parsed.host
    if host.endswith(".") and host.strip("."):
        host = host.rstrip(".")  # ``example.test.`` is ``example.test``, as in canonical URLs
    return host if parsed.port is None else f"{host}:{parsed.port}"


def _canonical(href: str, host_end: int, search: int, fragment: int) -> str:
    """``href`` without fragment, its query's parts sorted (none if empty), no trailing
    dot after a domain (``host_end`` 0: the host is an address, kept as it is)."""
    end = len(href) if fragment == _OMITTED else fragment
    head, path = href[:host_end], href[host_end : end if search == _OMITTED else search]
    if head.endswith(".") and head.rstrip(".")[-1:] not in ("/", "@", ""):
        head = head.rstrip(".")  # an all-dots host is kept: it has no other name
    if search == _OMITTED or search + 1 == end:
        return head + path
    query = "&".join(sorted(href[search + 1 : end].split("&")))
    query = query[1:] if query.startswith("?") else query  # as setting ``search`` does
    return head + path + ("?" + query if query else "")


def wire_url(url: str) -> str:
    """The URL serialised as the standard says (ASCII, percent-encoded): what goes on
    the request line. Idempotent: a URL ``resolve`` gave is returned as it is."""
    parsed = parse(url)
    if parsed is None:
        raise ValueError("not a URL by the URL Standard")
    return parsed.href


def canonical_url(url: str) -> str:
    """The URL fingerprints hash: serialised by the standard, without fragment, the
    query's parts sorted (none if empty), no trailing dot on the host. One that does not parse is
    kept as it is (the scheduler rejects it anyway)."""
    parsed = parse(url)
    return url if parsed is None else parsed.canonical


def check_url(url: str) -> tuple[str | None, str]:
    """``(reason, host)``: why ``url`` cannot be fetched at all (None if it can); the
    host is in ASCII (IDNA), without brackets or trailing dot, as scopes compare it."""
    parsed = parse(url)
    if parsed is None:
        return "malformed URL: not an absolute URL by the URL Standard", ""
    if parsed.scheme not in DEFAULT_PORTS:
        return f"unsupported scheme {parsed.scheme!r}", parsed.host
    if parsed.host_type == HostType.DEFAULT and not _resolvable(parsed.host):
        return f"invalid host name {parsed.host!r}", parsed.host
    return None, parsed.host


def _resolvable(host: str) -> bool:
    """Whether DNS could look ``host`` up: labels of 1 to 63 octets, 253 in all (the
    standard accepts ``a..b``; no resolver does)."""
    labels = host.split(".")
    return len(host) <= 253 and all(0 < len(label) <= 63 for label in labels)


def normal_host(name: str) -> str:
    """A host name as ``check_url`` gives it (for names configured by hand, such as
    allowed domains): ASCII through IDNA, lower case, no trailing dot."""
    name = name.strip().lstrip(".")
    ascii_name: bytes | str = idna_to_ascii(name) or name.lower()
    text = ascii_name.decode() if isinstance(ascii_name, bytes) else ascii_name
    return text.rstrip(".")


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` with the default port filled in: what a browser calls the
    URL's origin (credentials are kept within one). A URL that does not parse is an
    origin of its own (``port`` -1)."""
    parsed = parse(url)
    if parsed is None:
        return "", url, -1
    port = parsed.port if parsed.port is not None else DEFAULT_PORTS.get(parsed.scheme)
    return parsed.scheme, parsed.host, port
