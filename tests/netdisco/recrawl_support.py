"""A site that answers conditional requests as a real one does, and counts them.

Every page has an ETag (a hash of its body) and a Last-Modified (when it last
changed); a request whose ``If-None-Match`` matches, or (without one) whose
``If-Modified-Since`` is not older, gets a 304. ``/liar/...`` answers 304 to
everything, as a misbehaving server would.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from netdisco import Response, Spider
from tests.netdisco.sites import LoopbackServer


class ConditionalSite(LoopbackServer):
    """Serves ``pages`` (path -> HTML) from memory; counts requests at the server."""

    def __init__(self, pages: dict[str, str] | None = None, *, delay: float = 0.0) -> None:
        self.delay = delay
        self.pages: dict[str, str] = {}
        self.changed: dict[str, datetime] = {}
        self.requests: Counter[str] = Counter()  # every request, by path
        self.conditional: Counter[str] = Counter()  # requests carrying a validator
        self.not_modified: Counter[str] = Counter()  # 304s sent
        self.full: Counter[str] = Counter()  # 200s sent
        self.headers: list[tuple[str, str | None, str | None]] = []  # path, INM, IMS
        self._clock = 1_700_000_000
        for path, body in (pages or {}).items():
            self.set(path, body)

    def set(self, path: str, body: str) -> None:
        """Create or change a page (its Last-Modified moves on by a second)."""
        self._clock += 1
        self.pages[path] = body
        self.changed[path] = datetime.fromtimestamp(self._clock, UTC)

    def load(self, root: Path) -> None:
        """Every page of a generated site (``netdisco.testing.write_site``)."""
        for file in root.rglob("*.html"):
            self.set("/" + str(file.relative_to(root)), file.read_text())

    @staticmethod
    def etag(body: str) -> str:
        return '"' + hashlib.sha1(body.encode()).hexdigest()[:16] + '"'

    def reset_counts(self) -> None:
        for counter in (self.requests, self.conditional, self.not_modified, self.full):
            counter.clear()
        self.headers.clear()

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        inm, ims = request.headers.get("If-None-Match"), request.headers.get("If-Modified-Since")
        self.requests[path] += 1
        self.headers.append((path, inm, ims))
        if inm is not None or ims is not None:
            self.conditional[path] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if path.startswith("/liar/"):
            self.not_modified[path] += 1
            return web.Response(status=304)
        body = self.pages.get(path)
        if body is None:
            return web.Response(status=404)
        etag, changed = self.etag(body), self.changed[path]
        headers = {"ETag": etag, "Last-Modified": format_datetime(changed, usegmt=True)}
        if self._fresh(inm, ims, etag, changed):
            self.not_modified[path] += 1
            return web.Response(status=304, headers=headers)
        self.full[path] += 1
        return web.Response(text=body, content_type="text/html", headers=headers)

    @staticmethod
    def _fresh(inm: str | None, ims: str | None, etag: str, changed: datetime) -> bool:
        if inm is not None:
            return etag in [tag.strip() for tag in inm.split(",")]
        if ims is not None:
            try:
                return parsedate_to_datetime(ims) >= changed
            except (TypeError, ValueError):
                return False
        return False


def page(*links: str, text: str = "") -> str:
    """An HTML page linking to ``links`` (site-relative)."""
    anchors = "".join(f'<a href="{link}">{link}</a>' for link in links)
    return f"<html><head><title>{text}</title></head><body>{anchors}</body></html>"


class Links(Spider):
    """One item per page fetched, every link followed."""

    name = "links"
    allowed_domains = ("127.0.0.1",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "status": response.status}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class NotedLinks(Links):
    """Also an item for every page that did not change (``on_not_modified``)."""

    name = "noted"

    def on_not_modified(self, response: Response) -> Iterator[Any]:
        yield {"unchanged": response.url, "status": response.status}
