"""Headless Chromium through Playwright: one browser per spider, a bounded set of pages.

Playwright drives the system's Chromium (``chromium`` setting, Debian's
``/usr/bin/chromium``) through ``executable_path``, so Playwright's own browser
download is never needed. The flags keep Chromium from making any connection of
its own (updates, sync, metrics). If the browser dies, the next page starts a new one;
if it stops answering (a call outlives ``render_timeout``), it is dropped and likewise
replaced, so a wedged Chromium costs a retry, never a hung crawl.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog

from netdisco.crawl.settings import Settings
from netdisco.exceptions import BrowserUnavailable, BrowserUnresponsive

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = structlog.get_logger(__name__)
T = TypeVar("T")
#: seconds the browser process has to answer a probe after a page timed out
PROBE_TIMEOUT = 5.0

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # Chromium's sandbox refuses to run as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def _playwright() -> Any:
    """``async_playwright``, or BrowserUnavailable saying how to install it."""
    try:
        from playwright.async_api import async_playwright
    except ImportError as exc:
        raise BrowserUnavailable(
            "render needs Playwright for Python: pip install 'netdiscovery[browser]'"
        ) from exc
    return async_playwright


def check_available(settings: Settings) -> None:
    """Raise BrowserUnavailable naming what ``render`` lacks: Playwright or Chromium."""
    _playwright()
    if not os.access(settings.chromium, os.X_OK):
        raise BrowserUnavailable(
            f"render needs Chromium at {settings.chromium} (Debian: apt-get install chromium; "
            "or set chromium to its path)"
        )


class BrowserPool:
    """A browser, restarted when it dies, and at most ``render_concurrency`` pages at once.

    Pages that rendered cleanly are kept for the next document (a new page costs a new
    renderer process: about ten times a navigation); any other page is closed.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pages = asyncio.Semaphore(settings.render_concurrency)
        self.restarts = 0
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._context: BrowserContext | None = None
        self._idle: list[Page] = []
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Check for Playwright and Chromium and launch the browser (BrowserUnavailable)."""
        await self.context()

    async def context(self) -> BrowserContext:
        """The live browser context, launching (or relaunching) the browser if need be."""
        async with self._lock:
            if self._context is None or self._browser is None or not self._browser.is_connected():
                await self._launch()
            assert self._context is not None
            return self._context

    async def take_page(self) -> Page:
        """An idle page of the live browser, or a new one (hold ``pages`` while using it)."""
        context = await self.context()
        while self._idle:
            page = self._idle.pop()
            if not page.is_closed() and page.context is context:
                return page
        return await self.bounded(context.new_page(), "opening a page")

    async def give_back(self, page: Page, *, reuse: bool) -> None:
        """Keep ``page`` for the next document, or close it."""
        try:
            if reuse and self._browser is not None and self._browser.is_connected():
                await self.bounded(page.unroute("**/*"), "unrouting a page")
                self._idle.append(page)
            else:
                await self.bounded(page.close(), "closing a page")
        except Exception as exc:  # a page of a crashed browser is gone already
            log.debug("page_dropped", error=repr(exc))

    async def bounded(self, call: Awaitable[T], what: str, grace: float = 0.0) -> T:
        """``call`` within ``render_timeout`` (+ ``grace``); past it the browser is taken
        for wedged and dropped (the next page relaunches it), and BrowserUnresponsive says
        what hung."""
        limit = self.settings.render_timeout + grace
        try:
            return await asyncio.wait_for(call, limit)
        except TimeoutError:
            log.warning("browser_unresponsive", what=what, timeout=limit)
            await self.discard()
            raise BrowserUnresponsive(f"browser did not answer {what} within {limit} s") from None

    def holds(self, page: Page) -> bool:
        """Whether ``page`` belongs to the live browser (not to one that died or was dropped)."""
        browser = self._browser
        return page.context is self._context and browser is not None and browser.is_connected()

    async def responsive(self) -> bool:
        """Whether the browser process answers a call of its own (not a page's renderer,
        which a page's script may legitimately keep busy); if not, it is dropped."""
        context = self._context
        if context is None:
            return False
        try:
            await asyncio.wait_for(context.cookies(), PROBE_TIMEOUT)
            return True
        except Exception as exc:  # hung or gone: either way not a browser to keep
            log.warning("browser_unresponsive", what="a probe", error=repr(exc))
            await self.discard()
            return False

    async def discard(self) -> None:
        """Drop the current browser, so the next page relaunches one."""
        async with self._lock:
            if self._browser is not None:
                self.restarts += 1
                await self._drop_browser()

    async def _launch(self) -> None:
        check_available(self.settings)
        if self._browser is not None:
            self.restarts += 1
            log.warning("browser_restarting", restarts=self.restarts)
            await self._drop_browser()
        elif self.restarts:
            log.warning("browser_restarting", restarts=self.restarts)
        if self._playwright is None:
            self._playwright = await _playwright()().start()
        assert self._playwright is not None
        self._browser = await self._playwright.chromium.launch(
            executable_path=self.settings.chromium, args=list(CHROMIUM_FLAGS), headless=True
        )
        self._context = await self._browser.new_context(service_workers="block")

    async def _drop_browser(self) -> None:
        self._idle.clear()
        browser, self._browser, self._context = self._browser, None, None
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), self.settings.render_timeout)
            except Exception as exc:  # a crashed or wedged browser may not close cleanly
                log.debug("browser_close_failed", error=repr(exc))

    async def close(self) -> None:
        """Close the browser and stop Playwright."""
        async with self._lock:
            await self._drop_browser()
            if self._playwright is not None:
                await self._playwright.stop()
                self._playwright = None
