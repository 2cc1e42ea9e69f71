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

from ada_url import URL, HostType, idna_to_ascii, join_url

#: the ports the standard leaves out of a URL (the only schemes netdisco fetches)
DEFAULT_PORTS = {"http": 80, "https": 443}


def resolve(base: str, url: str) -> str:
    """``url`` resolved against ``base`` as the URL Standard says; ValueError if it
    does not parse (``http://[oops``, a relative URL on a base that has no path)."""
    return str(join_url(base, url))


def wire_url(url: str) -> str:
    """The URL serialised as the standard says (ASCII, percent-encoded): what goes on
    the request line. Idempotent: a URL ``resolve`` gave is returned as it is."""
    return str(URL(url).href)


@lru_cache(maxsize=16384)  # about 4 MB: most links on a site point at few pages
def canonical_url(url: str) -> str:
    """The URL fingerprints hash: serialised by the standard, without fragment, the
    query's parts sorted (none if empty), no trailing dot on the host. One that does not parse is
    kept as it is (the scheduler rejects it anyway)."""
    try:
        parsed = URL(url)
    except ValueError:
        return url
    parsed.hash = ""
    query = parsed.search[1:]
    parsed.search = "&".join(sorted(query.split("&"))) if query else ""  # "?" alone: none
    hostname = parsed.hostname
    if hostname.endswith(".") and parsed.host_type == HostType.DEFAULT:
        parsed.hostname = hostname.rstrip(".")
    return str(parsed.href)


@lru_cache(maxsize=4096)
def check_url(url: str) -> tuple[str | None, str]:
    """``(reason, host)``: why ``url`` cannot be fetched at all (None if it can); the
    host is in ASCII (IDNA), without brackets or trailing dot, as scopes compare it."""
    try:
        parsed = URL(url)
    except ValueError:
        return "malformed URL: not an absolute URL by the URL Standard", ""
    scheme = parsed.protocol[:-1]
    host = _bare_host(parsed)
    if scheme not in DEFAULT_PORTS:
        return f"unsupported scheme {scheme!r}", host
    if parsed.host_type == HostType.DEFAULT and not _resolvable(host):
        return f"invalid host name {host!r}", host
    return None, host


def _bare_host(parsed: URL) -> str:
    return str(parsed.hostname).strip("[]").rstrip(".")


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
    try:
        parsed = URL(url)
    except ValueError:
        return "", url, -1
    scheme = parsed.protocol[:-1]
    port = int(parsed.port) if parsed.port else DEFAULT_PORTS.get(scheme)
    return scheme, _bare_host(parsed), port
