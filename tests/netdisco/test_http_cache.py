"""The development HTTP cache against a loopback server that counts what it is asked."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from netdisco import CallablePipeline, Crawler, Request, Response, Settings, Spider
from netdisco.crawl.middleware import httpcache
from netdisco.testing import serve


class Server:
    """Answers every method on every path, counting (method, path, body)."""

    def __init__(self) -> None:
        self.asked: Counter[tuple[str, str, bytes]] = Counter()
        self.base = ""

    async def answer(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.asked[(request.method, request.path, body)] += 1
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private/\n")
        n = int(request.path.rsplit("/", 1)[-1] or 0)
        links = "".join(f'<a href="/p/{m}">{m}</a>' for m in (n + 1, n + 2) if m < 12)
        html = f"<html><title>{request.method} {n} {body.decode()}</title>{links}</html>"
        return web.Response(text=html, content_type="text/html")


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    counting = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", counting.answer)
    async with serve(app) as base:
        counting.base = base
        yield counting


def spider_for(base: str, requests: list[tuple[str, bytes | None]] | None = None) -> Spider:
    class Pages(Spider):
        name = "pages"

        async def start(self) -> AsyncIterator[Request]:
            for method, body in requests or [("GET", None)]:
                yield Request(f"{base}/p/0", method=method, body=body, callback=self.parse)

        def parse(self, response: Response) -> Any:
            yield {"title": response.css("title::text").get(), "url": response.url}
            if response.request.method == "GET":
                yield from response.follow_all(css="a", callback=self.parse)

    return Pages()


async def crawl(spider: Spider, **settings: Any) -> list[Any]:
    items: list[Any] = []
    pipeline = CallablePipeline(items.append)
    await Crawler(spider, Settings(progress_interval=0, **settings), pipelines=[pipeline]).run()
    return sorted(items, key=lambda item: item["url"])


async def test_a_second_run_sends_nothing_to_the_server(server: Server, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    first = await crawl(spider_for(server.base), http_cache=cache)
    assert len(first) == 12
    asked = sum(server.asked.values())
    assert asked == 13  # robots.txt and the 12 pages
    second = await crawl(spider_for(server.base), http_cache=cache)
    assert second == first
    assert sum(server.asked.values()) == asked  # not one request more, robots.txt included
    assert _entries(Path(cache)) == 13  # a directory one can delete: a file per response


def _entries(directory: Path) -> int:
    return sum(1 for _ in directory.rglob("*.json"))


async def test_another_method_or_body_is_never_served_from_the_cache(
    server: Server, tmp_path: Path
) -> None:
    cache = str(tmp_path / "cache")
    await crawl(spider_for(server.base, [("POST", b"a=1")]), http_cache=cache)
    await crawl(spider_for(server.base, [("POST", b"a=2")]), http_cache=cache)
    await crawl(spider_for(server.base, [("PUT", b"a=1")]), http_cache=cache)
    items = await crawl(spider_for(server.base, [("POST", b"a=2")]), http_cache=cache)
    assert items[0]["title"] == "POST 0 a=2"
    assert {key: n for key, n in server.asked.items() if key[1] == "/p/0"} == {
        ("POST", "/p/0", b"a=1"): 1, ("POST", "/p/0", b"a=2"): 1, ("PUT", "/p/0", b"a=1"): 1,
    }  # fmt: skip


class Clock:
    """The cache's wall clock (``time.time``), moved by the test only."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


async def test_entries_expire_and_without_the_setting_nothing_is_cached(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache, clock = str(tmp_path / "cache"), Clock(1_800_000_000.0)
    monkeypatch.setattr(httpcache, "time", clock)  # ages in the cache's own clock
    await crawl(spider_for(server.base), http_cache=cache, http_cache_expiration=0.2)
    clock.now += 0.1
    await crawl(spider_for(server.base), http_cache=cache, http_cache_expiration=0.2)
    assert server.asked[("GET", "/p/0", b"")] == 1  # still fresh
    clock.now += 0.2
    await crawl(spider_for(server.base), http_cache=cache, http_cache_expiration=0.2)
    assert server.asked[("GET", "/p/0", b"")] == 2  # expired, fetched again
    await crawl(spider_for(server.base))
    await crawl(spider_for(server.base))
    assert server.asked[("GET", "/p/0", b"")] == 4
