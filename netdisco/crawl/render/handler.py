"""The browser download handler: the document by aiohttp, the rendering by Chromium.

The main document is fetched as any request is (one hop, so the downloader's
redirects, retries, robots and politeness apply to it) and handed to Chromium
through request interception; Chromium loads the page's scripts and styles
itself, without images, fonts and media (``render_block``), waits for
``render_wait`` and returns the DOM. The Response keeps the document's status and
headers, with the rendered DOM as its UTF-8 body. Redirects, errors and documents
that are not HTML are returned as they came.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from multidict import CIMultiDict

from netdisco.crawl.render.pool import BrowserPool
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.crawl.stats import Stats
from netdisco.crawl.transport import DownloadHandler
from netdisco.exceptions import (
    BrowserCrashed,
    BrowserUnavailable,
    BrowserUnresponsive,
    RenderError,
    RenderTimeout,
)

if TYPE_CHECKING:
    from playwright.async_api import Page, Route

LOAD_STATES = ("load", "domcontentloaded", "networkidle")
HTML_TYPES = ("text/html", "application/xhtml+xml")


class RenderingHandler:
    """Renders HTML documents in headless Chromium; see the module docstring."""

    def __init__(self, inner: DownloadHandler, settings: Settings, stats: Stats) -> None:
        self.inner = inner
        self.settings = settings
        self.stats = stats
        self.pool = BrowserPool(settings)

    async def start(self) -> None:
        """Launch the browser now (the ``render`` setting), so a missing one fails the start."""
        await self.pool.start()

    async def close(self) -> None:
        """Close the browser."""
        await self.pool.close()

    async def fetch(self, request: Request) -> Response:
        """The document, rendered when it is an HTML page that arrived whole."""
        response = await self.inner.fetch(request)
        content_type = response.headers.get("Content-Type", "text/html").lower()
        if response.status != 200 or not content_type.startswith(HTML_TYPES):
            return response
        html = await self.render(response)
        headers: CIMultiDict[str] = CIMultiDict(response.headers)
        headers.popall("Content-Encoding", None)
        headers.popall("Content-Length", None)
        headers["Content-Type"] = "text/html; charset=utf-8"
        body = html.encode("utf-8")
        return Response(response.url, response.status, headers, body, response.request)

    async def render(self, document: Response) -> str:
        """The DOM after ``document`` ran in a page, or a RenderError saying why not."""
        async with self.pool.pages:
            try:
                page = await self.pool.take_page()
            except BrowserUnavailable:
                raise
            except Exception as exc:
                reason = str(exc).splitlines()[0] if str(exc) else repr(exc)
                raise BrowserCrashed(f"no page: {reason}", url=document.url) from exc
            clean = False
            try:
                # _run bounds its own waits; this bounds the calls that have no timeout
                html = await self.pool.bounded(self._run(page, document), "rendering", grace=5.0)
                clean = True
                return html
            except BrowserUnresponsive as exc:
                raise BrowserCrashed(str(exc), url=document.url) from exc
            finally:
                await self.pool.give_back(page, reuse=clean)

    async def _run(self, page: Page, document: Response) -> str:
        from playwright.async_api import Error, TimeoutError

        s = self.settings
        wait = s.render_wait if s.render_wait in LOAD_STATES else "load"
        served: list[bool] = []  # the document is served once; later navigations are refused
        deadline = time.monotonic() + s.render_timeout  # one budget for load and selector
        try:
            await page.route("**/*", lambda route: self._route(route, document, served))
            await page.goto(document.url, wait_until=wait, timeout=s.render_timeout * 1000)  # type: ignore[arg-type]
            if s.render_wait not in LOAD_STATES:
                left = max(deadline - time.monotonic(), 0.001) * 1000
                await page.wait_for_selector(s.render_wait, state="attached", timeout=left)
            return await page.content()
        except TimeoutError as exc:
            if not await self.pool.responsive():  # not the page: the browser is wedged
                raise BrowserCrashed("browser stopped answering", url=document.url) from exc
            self.stats.render_timeouts += 1
            raise RenderTimeout(
                f"page did not reach {s.render_wait!r} within {s.render_timeout} s",
                url=document.url,
            ) from exc
        except Error as exc:
            reason = (exc.message or repr(exc)).splitlines()[0]  # the rest is Chromium's log
            if not self.pool.holds(page):
                raise BrowserCrashed(f"browser died: {reason}", url=document.url) from exc
            raise RenderError(f"render failed: {reason}", url=document.url) from exc

    async def _route(self, route: Route, document: Response, served: list[bool]) -> None:
        """Serve the fetched document itself; block what ``render_block`` names, and any
        navigation away from the document (the DOM returned is the document's)."""
        request = route.request
        if request.is_navigation_request() and request.frame.parent_frame is None:
            if served:
                await route.abort("blockedbyclient")
                return
            served.append(True)
            content_type = document.headers.get("Content-Type", "text/html")
            await route.fulfill(
                status=document.status, headers={"Content-Type": content_type}, body=document.body
            )
        elif request.resource_type in self.settings.render_block:
            await route.abort("blockedbyclient")
        else:
            await route.continue_()
