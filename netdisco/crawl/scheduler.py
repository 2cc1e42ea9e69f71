"""Step 2 of the data flow: admit a request into the frontier, or say why not.

In order, as Heritrix's preselector: a valid http(s) URL, in scope (allowed
domains with their subdomains, then ``allow``/``deny`` patterns), within
``depth_limit``, not yet seen (fingerprint of the canonical URL). A redirect's
target passes the same checks (but depth) before the downloader follows it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Sequence

from netdisco.crawl.context import CrawlContext
from netdisco.crawl.lru import LRU
from netdisco.crawl.request import Request
from netdisco.crawl.urls import canonical_url, check_url, normal_host
from netdisco.exceptions import DuplicateRedirect, InvalidURL, OutOfScope

#: seeds admitted at a time, so that a seed source of millions streams
SEED_BATCH = 100


def fingerprint(request: Request) -> bytes:
    """16 bytes that are equal for requests that fetch the same resource."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(request.method.encode())
    digest.update(canonical_url(request.url).encode())
    if request.body:
        digest.update(request.body)
    return digest.digest()


class Scope:
    """Which URLs a spider may fetch: its domains (and their subdomains) and patterns.

    Host decisions are cached for the ``cache_size`` most recent hosts: links name
    millions of hosts in a long crawl, most of them rejected and never met again.
    """

    def __init__(
        self,
        domains: Sequence[str],
        allow: Sequence[str],
        deny: Sequence[str],
        cache_size: int = 50_000,
    ) -> None:
        self.domains = tuple(normal_host(d) for d in domains)
        self.allow = [re.compile(p) for p in allow]
        self.deny = [re.compile(p) for p in deny]
        self._hosts: LRU[str, bool] = LRU(cache_size)

    def _host_allowed(self, host: str) -> bool:
        allowed = self._hosts.get(host)
        if allowed is None:
            allowed = not self.domains or any(
                host == d or host.endswith("." + d) for d in self.domains
            )
            self._hosts.put(host, allowed)
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


class Scheduler:
    """Turns requests from callbacks and pushes into frontier entries, counting rejections.

    ``scope`` defaults to the spider's ``allowed_domains`` and the ``allow``/``deny``
    settings."""

    def __init__(self, ctx: CrawlContext, scope: Scope | None = None) -> None:
        s = ctx.settings
        self.ctx = ctx
        self.settings = s
        self.stats = ctx.stats
        self.frontier = ctx.frontier
        self.scope = scope or Scope(ctx.spider.allowed_domains, s.allow, s.deny, s.host_cache_size)

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
        """Queue what may be queued; for each request, None or the reason it was not.
        Idle workers are woken for what was queued."""
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
        queued = 0
        for index, reason in enumerate(reasons):
            if reason is None and not next(added):
                reasons[index] = "already seen"
                self.stats.filtered += 1
            elif reason is None:
                self.stats.scheduled += 1
                queued += 1
        self.ctx.notify(queued)
        return reasons

    async def admit_seeds(self, seeds: AsyncIterator[Request]) -> None:
        """Admit seeds ``SEED_BATCH`` at a time; those read before an error are admitted
        all the same (the error goes on to the caller)."""
        batch: list[Request] = []
        try:
            async for request in seeds:
                batch.append(request)
                if len(batch) >= SEED_BATCH:
                    await self.admit(batch)
                    batch = []
        finally:
            if batch:
                await self.admit(batch)

    async def admit_redirect(self, hop: Request, *, dont_filter: bool) -> None:
        """A redirect's target must be a valid URL in scope, and not fetched or queued yet
        unless ``dont_filter``: it is marked seen here (the frontier's ``claim``), so that
        a link to it later is not fetched again."""
        reason, host = check_url(hop.url)
        if reason is not None:
            raise InvalidURL(f"redirect to {hop.url!r}: {reason}", url=hop.url)
        reason = self.scope.reason(hop.url, host)
        if reason is not None:
            raise OutOfScope(f"redirect to {hop.url}: {reason}", url=hop.url)
        hop.fingerprint = fingerprint(hop)
        if not (await self.frontier.claim([hop]))[0] and not dont_filter:
            raise DuplicateRedirect(
                f"redirect to {hop.url}, already fetched or queued", url=hop.url
            )
