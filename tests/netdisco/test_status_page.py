"""The engine's status page: HTML for a browser, JSON for everyone else, ``/`` points to it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.engine.status_page import render, wants_html, when
from tests.monitor.test_http import CHROMIUM, chromium

from .engine_site import site_spider

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.mark.parametrize("child", [False, True], ids=["in-loop", "api-process"])
async def test_negotiated_on_accept_and_the_root_redirects(site: str, child: bool) -> None:
    settings = EngineSettings(id="page-e", port=0, api_process=child)
    async with SpiderEngine(settings) as engine:
        engine.add_spider(site_spider("one", site, "slow"), Settings(progress_interval=0))
        await engine.start()
        base = f"http://127.0.0.1:{engine.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/", allow_redirects=False) as response:
                assert response.status == 302
                assert response.headers["Location"] == "/netdiscovery/engine"
            for accept in (None, "*/*", "application/json"):
                headers = {"Accept": accept} if accept else {}
                async with http.get(base + "/netdiscovery/engine", headers=headers) as response:
                    assert response.content_type == "application/json", accept
                    assert (await response.json())["id"] == "page-e"
            async with http.get(base + "/", headers={"Accept": BROWSER}) as response:
                assert response.content_type == "text/html"
                assert response.headers["Vary"] == "Accept"
                page = await response.text()
    assert "<td>one</td>" in page
    assert " UTC (" in page


def test_browsers_get_html_and_clients_json() -> None:
    assert wants_html(BROWSER)
    assert not wants_html("*/*")
    assert not wants_html("")
    assert not wants_html("application/json, text/html;q=0.5")
    assert not wants_html("text/html;q=bogus")
    assert when(None) == "-"
    now = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
    assert when(now - 120, now=now) == "2025-12-31 23:58:00 UTC (2.0 min ago)"


def test_every_value_is_escaped() -> None:
    evil = "<script>alert(1)</script>"
    page = render({"id": evil, "spiders": [{"name": evil, "state": evil}], "facts": {}})
    assert "<script>" not in page
    assert "&lt;script&gt;" in page


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent")
async def test_a_browser_sees_the_page(site: str, tmp_path: Path) -> None:
    async with SpiderEngine(EngineSettings(id="page-b", port=0)) as engine:
        engine.add_spider(site_spider("one", site, "slow"), Settings(progress_interval=0))
        await engine.start()
        async with chromium(f"http://127.0.0.1:{engine.port}/", tmp_path / "profile") as page:
            for _ in range(100):
                if await page.eval("document.title") == "netdisco engine page-b":
                    break
                await asyncio.sleep(0.1)
            text = await page.eval("document.body.innerText")
            cells = await page.eval("[...document.querySelectorAll('td')].map(c => c.innerText)")
    assert await_title_ok(text)
    assert "one" in cells
    assert "UTC" in text


def await_title_ok(text: str) -> bool:
    return "netdisco engine page-b" in text and "Spiders" in text


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent")
async def test_the_page_reads_in_words_and_asks_for_nothing_missing(
    site: str, tmp_path: Path
) -> None:
    """Headed by words (not queue_size or started_at), its own (empty) icon: a load asks
    the engine for nothing it does not have (no /favicon.ico 404). A screenshot is kept."""
    from playwright.async_api import async_playwright

    from netdisco.crawl.render.pool import CHROMIUM_FLAGS

    async with SpiderEngine(EngineSettings(id="page-w", port=0)) as engine:
        engine.add_spider(site_spider("one", site, "slow"), Settings(progress_interval=0))
        await engine.start()
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=str(CHROMIUM), args=list(CHROMIUM_FLAGS), headless=True
            )
            try:
                page = await browser.new_page()
                missing: list[str] = []
                page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
                await page.goto(f"http://127.0.0.1:{engine.port}/", wait_until="networkidle")
                heads = await page.locator("th").all_text_contents()
                icon = await page.locator("link[rel=icon]").count()
                await page.screenshot(path=str(tmp_path / "engine-page.png"), full_page=True)
            finally:
                await browser.close()
    assert missing == []
    assert icon == 1
    assert {"spider", "pages", "queued", "started"} <= set(heads), heads
    assert not {"succeeded", "queue_size", "started_at"} & set(heads), heads
