"""Headless Chromium through Playwright: one browser per spider, a bounded set of pages.

Playwright drives the system's Chromium (``chromium`` setting, Debian's
``/usr/bin/chromium``) through ``executable_path``, so Playwright's own browser
download is never needed. The flags keep Chromium from making any connection of
its own (updates, sync, metrics). If the browser dies, the next page starts a new one.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

import structlog

from netdisco.crawl.settings import Settings
from netdisco.exceptions import BrowserUnavailable

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = structlog.get_logger(__name__)

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
        return await context.new_page()

    async def give_back(self, page: Page, *, reuse: bool) -> None:
        """Keep ``page`` for the next document, or close it."""
        try:
            if reuse and self._browser is not None and self._browser.is_connected():
                await page.unroute("**/*")
                self._idle.append(page)
            else:
                await page.close()
        except Exception as exc:  # a page of a crashed browser is gone already
            log.debug("page_dropped", error=repr(exc))

    async def _launch(self) -> None:
        check_available(self.settings)
        if self._browser is not None:
            self.restarts += 1
            log.warning("browser_restarting", restarts=self.restarts)
            await self._drop_browser()
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
                await browser.close()
            except Exception as exc:  # a crashed browser may not close cleanly
                log.debug("browser_close_failed", error=repr(exc))

    async def close(self) -> None:
        """Close the browser and stop Playwright."""
        async with self._lock:
            await self._drop_browser()
            if self._playwright is not None:
                await self._playwright.stop()
                self._playwright = None
