"""Rendering in Debian's headless Chromium: a site whose links exist only after JavaScript.

Every page builds its links with a script, so without rendering a crawl sees the
first page only. Chromium runs with the flags of ``render.CHROMIUM_FLAGS`` and loads
only loopback pages; images and fonts are never requested.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.exceptions import BrowserUnavailable
from netdisco.testing import eventually, serve

pytestmark = [
    pytest.mark.skipif(
        not os.access("/usr/bin/chromium", os.X_OK), reason="needs Debian's chromium"
    ),
    pytest.mark.timeout(180),  # Chromium starts in seconds, or ten on a loaded machine
]
SCRIPT = """
const links = JSON.parse(document.body.dataset.links);
document.getElementById("links").innerHTML =
  links.map(href => `<a href="${href}">${href}</a>`).join("") + '<span id="rendered"></span>';
"""
PAGE = """<!doctype html><html><head><script src="/app.js" defer></script></head>
<body data-links='{links}'><div id="links"></div><img src="/img.png">{extra}</body></html>"""
NEVER_SETTLES = "<script>setInterval(() => fetch('/ping'), 50)</script>"


def children(path: str) -> list[str]:
    """/ links to /p/0..4, /p/N to /p/N+5 (11 pages); /p/3 is disallowed by robots.txt."""
    if path == "/":
        return [f"/p/{n}" for n in range(5)]
    number = int(path.rsplit("/", 1)[-1]) if path.startswith("/p/") else 99
    return [f"/p/{number + 5}"] if number < 5 else []


def js_site(hits: Counter[str]) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if request.path == "/p/6" and hits[request.path] == 1:
            raise web.HTTPServiceUnavailable()  # retried, as for any request
        extra = NEVER_SETTLES if request.path == "/busy" else ""
        body = PAGE.format(links=str(children(request.path)).replace("'", '"'), extra=extra)
        return web.Response(text=body, content_type="text/html", headers={"X-Page": request.path})

    async def asset(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /p/3\n")
        if request.path == "/app.js":
            return web.Response(text=SCRIPT, content_type="application/javascript")
        return web.Response(body=b"\x89PNG", content_type="image/png")

    app = web.Application()
    for path in ("/robots.txt", "/app.js", "/img.png", "/ping"):
        app.router.add_get(path, asset)
    app.router.add_get("/{path:.*}", page)
    return app


class JsPages(Spider):
    name = "js"

    def __init__(self, url: str, *, per_request: bool = False) -> None:
        super().__init__()
        self.url = url
        self.per_request = per_request

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.url + "/", render=self.per_request)

    def parse(self, response: Response) -> Any:
        yield {
            "url": response.url,
            "page": response.headers.get("X-Page"),
            "status": response.status,
        }
        yield from response.follow_all(css="a", render=self.per_request)


def settings(**values: Any) -> Settings:
    base = Settings(progress_interval=0, retry_backoff=0.05, render_concurrency=2)
    return base.replace(**values)


async def crawl(spider: Spider, **values: Any) -> tuple[Crawler, list[Any]]:
    items: list[Any] = []
    crawler = Crawler(spider, settings(**values))
    crawler.items.subscribe(items.append)
    await crawler.run()
    return crawler, items


ALL = sorted(["/", *(f"/p/{n}" for n in range(10) if n not in (3, 8))])


@pytest.mark.parametrize("mode", ["setting", "request", "off"])
async def test_links_built_by_javascript_are_crawled_only_when_rendered(mode: str) -> None:
    hits: Counter[str] = Counter()
    async with serve(js_site(hits)) as url:
        spider = JsPages(url, per_request=mode == "request")
        crawler, items = await crawl(spider, render=mode == "setting")
    pages = sorted(item["url"].removeprefix(url) for item in items)
    if mode == "off":
        assert pages == ["/"]
        return
    assert pages == ALL  # /p/3 (robots.txt) and /p/8 (its child) are never reached
    assert crawler.stats.robots_blocked == 1
    assert crawler.stats.retried == 1  # /p/6 answered 503 once
    assert all(item["page"] == item["url"].removeprefix(url) for item in items)
    assert {item["status"] for item in items} == {200}
    assert hits["/img.png"] == 0  # images are blocked
    assert hits["/app.js"] >= 1  # scripts are not
    assert all(hits[page] == 1 for page in ALL if page != "/p/6")


async def test_a_page_that_never_settles_times_out_and_is_counted() -> None:
    hits: Counter[str] = Counter()
    async with serve(js_site(hits)) as url:

        class Busy(JsPages):
            async def start(self) -> AsyncIterator[Request]:
                yield Request(url + "/busy")
                yield Request(url + "/p/9")

        crawler, items = await crawl(
            Busy(url), render=True, render_wait="networkidle", render_timeout=10, retries=0
        )
    assert [item["url"] for item in items] == [url + "/p/9"]
    assert crawler.stats.render_timeouts == 1
    assert crawler.stats.failed == 1
    assert "did not reach 'networkidle' within 10.0 s" in (crawler.stats.last_error or "")


async def test_a_selector_wait_and_a_chromium_crash_mid_crawl() -> None:
    """Chromium is killed (by its pid) after the first page: the pool starts a new one
    and the requests it was rendering are retried, so the crawl is still complete."""
    hits: Counter[str] = Counter()
    async with serve(js_site(hits)) as url:
        spider = JsPages(url)
        crawler = Crawler(spider, settings(render=True, render_wait="#rendered", retries=4))
        items: list[Any] = []
        crawler.items.subscribe(items.append)
        await crawler.start()
        await eventually(lambda: items, "a first rendered page")
        for pid in browser_pids():
            os.kill(pid, signal.SIGKILL)
        await crawler.wait()
    assert sorted(item["url"].removeprefix(url) for item in items) == ALL
    renderer = crawler.downloader.renderer
    assert renderer is not None
    assert renderer.pool.restarts >= 1


async def test_a_wedged_chromium_is_dropped_and_replaced() -> None:
    """Chromium is stopped (SIGSTOP) after the first page, so it neither dies nor
    answers: the calls to it time out, the pool drops it and launches another, and the
    crawl still completes."""
    hits: Counter[str] = Counter()
    stopped: list[int] = []
    async with serve(js_site(hits)) as url:
        crawler = Crawler(JsPages(url), settings(render=True, render_timeout=4, retries=4))
        items: list[Any] = []
        crawler.items.subscribe(items.append)
        await crawler.start()
        try:
            await eventually(lambda: items, "a first rendered page")
            stopped = browser_pids()
            for pid in stopped:
                os.kill(pid, signal.SIGSTOP)
            await crawler.wait()
        finally:
            for pid in stopped:  # Playwright kills a browser that will not close
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert sorted(item["url"].removeprefix(url) for item in items) == ALL
    renderer = crawler.downloader.renderer
    assert renderer is not None
    assert renderer.pool.restarts >= 1


def browser_pids() -> list[int]:
    """The Chromium browser processes (not its helpers) this test process started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        is_browser = argv[0].endswith(b"chromium") and not any(
            a.startswith(b"--type=") for a in argv
        )
        if is_browser and _descends_from(int(entry.name), os.getpid()):
            found.append(int(entry.name))
    assert found, "no Chromium process of ours"
    return found


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == ancestor:
            return True
    return False


async def test_missing_chromium_or_playwright_is_named(tmp_path: Path) -> None:
    crawler = Crawler(JsPages("http://127.0.0.1:9"), settings(render=True, chromium="/no/chromium"))
    with pytest.raises(BrowserUnavailable, match="render needs Chromium at /no/chromium"):
        await crawler.start()
    assert crawler.state.value == "failed"
    code = (
        "import sys; sys.modules['playwright'] = None\n"
        "from netdisco.crawl.render.pool import check_available\n"
        "from netdisco.crawl.settings import Settings\n"
        "check_available(Settings(render=True))\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await process.communicate()
    assert process.returncode == 1
    assert "render needs Playwright for Python: pip install 'netdiscovery[browser]'" in (
        stderr.decode()
    )
