"""robots.txt per origin, as RFC 9309 asks (parsed by protego).

- 2xx: obeyed, and trusted for ``robots_max_age`` (at most 24 h), then fetched again.
- 4xx: no restrictions.
- 5xx or a timeout: the site is unreachable, so everything is disallowed. The
  requests for it *wait* (they are neither failed nor denied) while robots.txt
  is fetched again in the background after a backoff that doubles from
  ``robots_backoff`` up to ``robots_max_backoff``, until it answers, or until it
  failed ``host_error_limit`` times in a row or has not answered for
  ``host_give_up_after`` seconds (2 minutes; the last try is timed to end by then):
  then the origin is given up, and its waiting and later requests fail with
  ``HostGivenUp``, which says why (a host that accepts and never answers cannot hold
  the crawl open for long).
- A connection error (refused, no such host) counts as "no robots.txt": the page
  fetch that follows fails with the real reason, and a dead host cannot hold the
  crawl open for ever.

At most ``robots_cache_size`` origins are kept (least recently used go first).

Read as RFC 9309 says: a byte-order mark is no part of the first line; groups are
matched by product token (``robots_agent``, else the first user agent's, ``netdisco``
of ``netdisco/0.1 (+...)``), case-insensitively and whole, so a group for ``net`` or
``org`` is not ours; protego does the rest (longest match, Allow winning ties, ``*``
and ``$``, percent-encoding). ``Sitemap:`` lines are kept (``RobotsCache.sitemaps``),
and so is our group's ``Crawl-delay`` (``RobotsCache.crawl_delay``; ``throttle`` caps it).

Each engine fetches the robots.txt of the hosts it crawls: in a shared crawl a host
has one owner at a time, so one engine reads it (again after the host moves).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass

import structlog
from protego import Protego

from netdisco._tasks import Tasks
from netdisco.crawl.lru import LRU
from netdisco.crawl.redirects import REDIRECT_STATUSES
from netdisco.crawl.request import Request
from netdisco.crawl.settings import Settings
from netdisco.crawl.transport import DownloadHandler
from netdisco.crawl.urls import host_key, parse, resolve
from netdisco.exceptions import (
    HostGivenUp,
    InvalidURL,
    ResponseTooLarge,
    TransferFailed,
    TransferTimeout,
)

log = structlog.get_logger(__name__)

#: RFC 9309 asks crawlers to parse at least 500 KiB
MAX_ROBOTS_SIZE = 512 * 1024
#: redirects followed to robots.txt (RFC 9309: at least five)
MAX_REDIRECTS = 10


@dataclass(eq=False)
class _Origin:
    """What is known of one origin's robots.txt; ``rules`` None: no answer to go by."""

    origin: str
    proxy: str | None
    rules: Protego | None = None
    crawl_delay: float | None = None  # the rules' Crawl-delay for our agent
    expires: float = 0.0
    failures: int = 0
    task: asyncio.Task[None] | None = None  # the fetch (and its retries) under way
    fetched: float = -math.inf  # when our last fetch of it ended (monotonic)
    given_up: str | None = None  # why no more tries (failed too often, or too long)

    def idle(self) -> bool:
        return self.task is None


class RobotsCache:
    """One robots.txt per origin; concurrent asks for one origin share one fetch."""

    def __init__(self, handler: DownloadHandler, settings: Settings) -> None:
        self.handler = handler
        self.settings = settings
        self.agent = robots_agent(settings)
        self._origins: LRU[str, _Origin] = LRU(settings.robots_cache_size, _Origin.idle)
        self._fetches = Tasks()  # each origin's fetch under way (with its retries)
        self.fetches = 0  # robots.txt requests made

    def __len__(self) -> int:
        return len(self._origins)

    def unreachable(self, url: str) -> bool:
        """Whether ``url``'s robots.txt failed and has not answered since: its requests wait."""
        entry = self._origins.peek(_origin(url))
        return (
            entry is not None
            and entry.rules is None
            and entry.failures > 0
            and entry.given_up is None
        )

    def fetched_at(self, url: str) -> float:
        """When this engine's last fetch of ``url``'s robots.txt ended (monotonic): the
        host's ``download_delay`` runs from there for the page that waited for it."""
        entry = self._origins.peek(_origin(url))
        return -math.inf if entry is None else entry.fetched

    def denies(self, url: str) -> bool:
        """Whether the rules known now for ``url``'s origin forbid it (nothing is
        fetched: unknown or expired rules deny nothing here)."""
        entry = self._origins.peek(_origin(url))
        if entry is None or entry.rules is None or time.monotonic() >= entry.expires:
            return False
        return not entry.rules.can_fetch(url, self.agent)

    async def allowed(self, url: str, proxy: str | None = None) -> bool:
        """Whether robots.txt lets us fetch ``url``; waits while it is unreachable."""
        origin = _origin(url)
        entry = self._origins.get(origin)
        if entry is None:
            entry = self._origins.put(origin, _Origin(origin, proxy))
        if entry.task is None and time.monotonic() >= entry.expires and entry.given_up is None:
            entry.rules = None
            entry.task = self._fetches.spawn(self._until_answered(entry), name=f"robots:{origin}")
        if entry.rules is None and entry.task is not None:
            await asyncio.shield(entry.task)  # one fetch; a waiter's cancel is not its
        if entry.given_up is not None:
            raise HostGivenUp(entry.given_up, url=url)
        assert entry.rules is not None
        return bool(entry.rules.can_fetch(url, self.agent))

    def crawl_delay(self, url: str) -> float | None:
        """The ``Crawl-delay`` of ``url``'s robots.txt for us (as written: unchecked)."""
        entry = self._origins.peek(_origin(url))
        return None if entry is None or entry.rules is None else entry.crawl_delay

    def sitemaps(self, url: str) -> tuple[str, ...]:
        """The ``Sitemap:`` URLs of ``url``'s robots.txt, as far as it is known here."""
        entry = self._origins.peek(_origin(url))
        return () if entry is None or entry.rules is None else tuple(entry.rules.sitemaps)

    async def close(self) -> None:
        """Stop the background fetches (the spider is closing)."""
        await self._fetches.cancel_all()

    async def _until_answered(self, entry: _Origin) -> None:
        """Fetch until robots.txt answers, backing off while the site is unreachable."""
        s = self.settings
        began = time.monotonic()
        # the last try starts early enough to end (time out) by host_give_up_after
        last_try = began + s.host_give_up_after - s.timeout if s.host_give_up_after else math.inf
        try:
            while (rules := await self._answer(entry)) is None:
                entry.failures += 1
                entry.given_up = self._give_up(entry, began, last_try)
                if entry.given_up is not None:
                    log.warning("robots_given_up", origin=entry.origin, reason=entry.given_up)
                    return
                delay = min(s.robots_backoff * 2 ** (entry.failures - 1), s.robots_max_backoff)
                delay = max(0.0, min(delay, last_try - time.monotonic()))
                log.warning("robots_unreachable", origin=entry.origin, retry_in=round(delay, 3))
                await asyncio.sleep(delay)
            entry.rules, entry.failures = rules, 0
            entry.crawl_delay = rules.crawl_delay(self.agent)
            entry.expires = time.monotonic() + s.robots_max_age
        finally:
            entry.task = None

    def _give_up(self, entry: _Origin, began: float, last_try: float) -> str | None:
        """Why to try ``entry`` no more, after a failure; None: try again."""
        limit, tries = self.settings.host_error_limit, entry.failures
        if limit and tries >= limit:
            return f"robots.txt of {entry.origin} failed {tries} times in a row (timeout or 5xx)"
        if time.monotonic() >= last_try:
            waited = time.monotonic() - began
            return (f"robots.txt of {entry.origin} did not answer for {waited:.0f} s "
                    f"({tries} tries; host_give_up_after)")  # fmt: skip
        return None

    async def _answer(self, entry: _Origin) -> Protego | None:
        """The rules, fetched and parsed (None: no answer to go by)."""
        text = await self._fetch(entry)
        return None if text is None else parse_robots(text, self.agent)

    async def _fetch(self, entry: _Origin) -> str | None:
        """The file's text, "" (allow all: 4xx, no connection), or None (5xx, timeout)."""
        self.fetches += 1
        try:
            return await self._follow(entry)
        finally:
            entry.fetched = time.monotonic()

    async def _follow(self, entry: _Origin) -> str | None:
        """Through the crawl's download handler, following up to ``MAX_REDIRECTS`` hops."""
        url = entry.origin + "/robots.txt"
        for _ in range(MAX_REDIRECTS + 1):
            try:
                response = await self.handler.fetch(Request(url, proxy=entry.proxy))
            except TransferTimeout:
                return None
            except (TransferFailed, InvalidURL, ResponseTooLarge) as exc:
                log.info("robots_fetch_failed", url=url, error=str(exc))
                return ""
            location = response.headers.get("Location")
            if response.status in REDIRECT_STATUSES and location:
                try:
                    url = resolve(url, location)
                except ValueError:  # a Location no browser could follow: no file
                    return ""
                continue
            if response.status >= 500:
                return None
            if response.status >= 400:
                return ""
            return response.body[:MAX_ROBOTS_SIZE].decode("utf-8", errors="replace")
        return ""  # RFC 9309: past the redirects followed, as if unavailable (allow all)


#: RFC 9309's product token: the part of a user-agent line's value that names a crawler
_PRODUCT_TOKEN = re.compile(r"[A-Za-z_-]+")
#: a user-agent line in the forms protego reads (``User-agent:``, ``User agent``, ...)
_AGENT_LINE = re.compile(
    r"^(?P<field>[ \t]*user[- ]?agent[ \t]*(?::|[ \t]))[ \t]*(?P<value>[^#\r\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
#: what a group for another crawler is renamed to: no product token holds a digit
_NOT_US = "0"


def robots_agent(settings: Settings) -> str:
    """The product token groups are matched by: ``robots_agent``, else the first user
    agent's first product (``netdisco`` of ``netdisco/0.1 (+https://...)``)."""
    return product_token(settings.robots_agent or settings.user_agent)


def product_token(user_agent: str) -> str:
    """A user agent's product token, lowercased: its first run of RFC 9309's
    ``[A-Za-z_-]`` (``netdisco`` of ``netdisco/0.1 (+https://...)``); "" if none."""
    match = _PRODUCT_TOKEN.match(user_agent.strip())
    return match.group().lower() if match else ""


def parse_robots(text: str, agent: str) -> Protego:
    """The rules of a robots.txt for ``agent`` (a product token), read as RFC 9309 says:
    no BOM, and only the groups naming ``agent`` or ``*`` (protego alone would match a
    group for ``net`` against ``netdisco``, a prefix)."""

    def ours_or_none(line: re.Match[str]) -> str:
        value = line["value"].strip()
        match = _PRODUCT_TOKEN.match(value)
        name = "*" if value.startswith("*") else (match.group().lower() if match else "")
        return line["field"] + " " + (name if name in ("*", agent) else _NOT_US)

    return Protego.parse(_AGENT_LINE.sub(ours_or_none, text.removeprefix("\ufeff")))


def _origin(url: str) -> str:
    """The robots.txt origin: one per scheme and host key (``HTTP://Example.test:80``
    and ``http://example.test`` share one file)."""
    parsed = parse(url)
    return url if parsed is None else f"{parsed.scheme}://{host_key(url)}"
