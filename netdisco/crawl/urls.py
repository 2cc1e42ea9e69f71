"""URL checks the scheduler and the downloader share: validity and canonical form.

Both are cached, because a crawl meets the same origins and the same links over
and over: validity depends only on scheme and authority, so it is checked once
per origin; canonical forms are cached for the most recent links.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url


@lru_cache(maxsize=16384)  # about 4 MB: most links on a site point at few pages
def canonical_url(url: str) -> str:
    """The URL in canonical form (sorted query, no fragment, normalised escapes)."""
    return canonicalize_url(url, keep_fragments=False)


def check_url(url: str) -> tuple[str | None, str]:
    """``(reason, host)``: why ``url`` cannot be fetched at all (None if it can)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _check_origin(url)
    netloc = rest.partition("/")[0].partition("?")[0].partition("#")[0]
    return _check_origin(f"{scheme}://{netloc}")


@lru_cache(maxsize=1024)
def _check_origin(origin: str) -> tuple[str | None, str]:
    """Validity depends only on scheme and authority: checked once per origin."""
    try:
        parts = urlsplit(origin)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"malformed URL: {exc}", ""
    if parts.scheme not in ("http", "https"):
        return f"unsupported scheme {parts.scheme!r}", host
    if not host:
        return "URL has no host", host
    if not _valid_host(host):
        return f"invalid host name {host!r}", host
    return None, host


#: characters no host name may hold (a subset of WHATWG's forbidden host code points)
_FORBIDDEN_IN_HOST = frozenset(' \t\r\n<>^|\\"`{}%')


def _valid_host(host: str) -> bool:
    """Whether a resolver could look ``host`` up (``a..b`` or a 64-letter label cannot)."""
    if ":" in host:  # an IPv6 literal, already checked by urlsplit
        return True
    if _FORBIDDEN_IN_HOST.intersection(host):
        return False
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` with the default port filled in: what a browser calls the
    URL's origin (credentials are kept within one)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:  # an invalid port: an origin of its own
        port = -1
    return scheme, (parts.hostname or "").rstrip("."), port
