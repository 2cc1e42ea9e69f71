"""robots.txt, fetched once per origin and cached (parsed by protego).

RFC 9309: a 4xx answer means no restrictions; a 5xx answer means the site is
unreachable, so everything is disallowed. A network error is treated as "no
robots.txt": the page fetch that follows will fail with the real reason.

With a frontier that shares robots.txt (``SharedRobots``: host queues in Redis)
one engine of the crawl fetches it and the others read its copy.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import aiohttp
import structlog
from protego import Protego

from netdisco.frontiers import SharedRobots

log = structlog.get_logger(__name__)

#: RFC 9309 asks crawlers to parse at least 500 KiB
MAX_ROBOTS_SIZE = 512 * 1024
_ALLOW_ALL = ""
_DENY_ALL = "User-agent: *\nDisallow: /"


class RobotsCache:
    """One parsed robots.txt per origin; concurrent asks for one origin share one fetch."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        user_agent: str,
        timeout: float,
        shared: SharedRobots | None = None,
    ) -> None:
        self.session = session
        self.shared = shared
        self.user_agent = user_agent
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._rules: dict[str, asyncio.Future[Protego]] = {}

    @property
    def fetches(self) -> int:
        """How many robots.txt files were requested (one per origin)."""
        return len(self._rules)

    async def allowed(self, url: str, proxy: str | None = None) -> bool:
        """Whether robots.txt lets us fetch ``url`` (fetched through ``proxy`` like the page)."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        rules = self._rules.get(origin)
        if rules is None:
            rules = asyncio.ensure_future(self._load(origin, proxy))
            self._rules[origin] = rules
        return bool((await rules).can_fetch(url, self.user_agent))

    async def _load(self, origin: str, proxy: str | None) -> Protego:
        if self.shared is None:
            return Protego.parse(await self._fetch(origin, proxy))
        text = await self.shared.robots_txt(origin, lambda: self._fetch(origin, proxy))
        return Protego.parse(text)

    async def _fetch(self, origin: str, proxy: str | None) -> str:
        """The rules as text: what robots.txt says, or allow-all / deny-all for its status."""
        url = origin + "/robots.txt"
        try:
            async with self.session.get(
                url, timeout=self.timeout, allow_redirects=True, proxy=proxy
            ) as resp:
                if resp.status >= 500:
                    log.warning("robots_unavailable", url=url, status=resp.status)
                    return _DENY_ALL
                if resp.status >= 400:
                    return _ALLOW_ALL
                body = await _read_up_to(resp, MAX_ROBOTS_SIZE)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:  # ValueError: a bad URL
            log.info("robots_fetch_failed", url=url, error=repr(exc))
            return _ALLOW_ALL
        return body.decode("utf-8", errors="replace")


async def _read_up_to(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The first ``limit`` bytes of the body (``content.read(n)`` stops at the first chunk)."""
    data = bytearray()
    async for chunk in resp.content.iter_chunked(65536):
        data += chunk
        if len(data) >= limit:
            break
    return bytes(data[:limit])
