"""Step 2 of the data flow: admit a request into the frontier, or say why not.

In order, as Heritrix's preselector: a valid http(s) URL, in scope (allowed
domains with their subdomains, then ``allow``/``deny`` patterns), within
``depth_limit``, not yet seen (fingerprint of the canonical URL).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache
from urllib.parse import urlsplit

from w3lib.url import canonicalize_url

from netdisco.frontier import Frontier
from netdisco.request import Request
from netdisco.settings import Settings
from netdisco.stats import Stats


@lru_cache(maxsize=16384)  # about 4 MB: most links on a site point at few pages
def canonical_url(url: str) -> str:
    """The URL in canonical form (sorted query, no fragment, normalised escapes)."""
    return canonicalize_url(url, keep_fragments=False)


def fingerprint(request: Request) -> bytes:
    """16 bytes that are equal for requests that fetch the same resource."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(request.method.encode())
    digest.update(canonical_url(request.url).encode())
    if request.body:
        digest.update(request.body)
    return digest.digest()


class Scope:
    """Which URLs a spider may fetch: its domains (and their subdomains) and patterns."""

    def __init__(self, domains: Sequence[str], allow: Sequence[str], deny: Sequence[str]) -> None:
        self.domains = tuple(d.lower().lstrip(".") for d in domains)
        self.allow = [re.compile(p) for p in allow]
        self.deny = [re.compile(p) for p in deny]
        self._hosts: dict[str, bool] = {}

    def _host_allowed(self, host: str) -> bool:
        allowed = self._hosts.get(host)
        if allowed is None:
            allowed = not self.domains or any(
                host == d or host.endswith("." + d) for d in self.domains
            )
            self._hosts[host] = allowed
        return allowed

    def reason(self, url: str, host: str) -> str | None:
        """Why ``url`` is out of scope, or None when it is in."""
        if not self._host_allowed(host):
            return f"host {host!r} is not in allowed_domains"
        if any(p.search(url) for p in self.deny):
            return "matches a deny pattern"
        if self.allow and not any(p.search(url) for p in self.allow):
            return "matches no allow pattern"
        return None


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


class Scheduler:
    """Turns requests from callbacks and pushes into frontier entries, counting rejections."""

    def __init__(self, settings: Settings, scope: Scope, frontier: Frontier, stats: Stats) -> None:
        self.settings = settings
        self.scope = scope
        self.frontier = frontier
        self.stats = stats

    def reject_reason(self, request: Request) -> str | None:
        """Why ``request`` may not be queued, before the duplicate check."""
        reason, host = check_url(request.url)
        if reason is not None:
            self.stats.invalid += 1
            return reason
        reason = self.scope.reason(request.url, host)
        if (
            reason is None
            and self.settings.depth_limit
            and (request.depth > self.settings.depth_limit)
        ):
            reason = f"depth {request.depth} is over depth_limit {self.settings.depth_limit}"
        if reason is not None:
            self.stats.filtered += 1
        return reason

    async def admit(self, requests: Sequence[Request]) -> list[str | None]:
        """Queue what may be queued; for each request, None or the reason it was not."""
        reasons: list[str | None] = []
        candidates: list[Request] = []
        for request in requests:
            reason = self.reject_reason(request)
            if reason is None:
                request.fingerprint = fingerprint(request)
                candidates.append(request)
            reasons.append(reason)
        if not candidates:
            return reasons
        added = iter(await self.frontier.add(candidates))
        for index, reason in enumerate(reasons):
            if reason is None and not next(added):
                reasons[index] = "already seen"
                self.stats.filtered += 1
            elif reason is None:
                self.stats.scheduled += 1
        return reasons
