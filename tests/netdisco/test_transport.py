"""The download handler seam: injectable, mockable, and the only place aiohttp's errors
are seen (above it, netdisco's own)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from multidict import CIMultiDict

from netdisco import Crawler, MockHandler, Request, Response, Settings, Spider
from netdisco.testing import free_port

CRAWL = Path(__file__).resolve().parents[2] / "netdisco" / "crawl"

PAGES = {
    "http://shop.test/": '<a href="/a">a</a> <a href="/private/x">x</a> <a href="/gone">g</a>',
    "http://shop.test/a": '<a href="/">home</a>',
    "http://shop.test/robots.txt": "User-agent: *\nDisallow: /private/\n",
}


class Shop(Spider):
    name = "shop"
    start_urls = ("http://shop.test/",)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}
        yield from response.follow_all(css="a")


async def test_a_crawl_runs_on_a_mock_handler_with_no_socket() -> None:
    handler = MockHandler.pages(PAGES)
    crawler = Crawler(Shop(), Settings(progress_interval=0, retries=0), download_handler=handler)
    items: list[Any] = []
    crawler.items.subscribe(items.append)
    await crawler.run()
    assert sorted(i["url"] for i in items) == ["http://shop.test/", "http://shop.test/a"]
    asked = [r.url for r in handler.requests]
    # robots.txt came through the handler too, once; /private/x never asked; /gone a 404
    assert sorted(asked) == sorted([*PAGES, "http://shop.test/gone"])
    assert crawler.stats.robots_blocked == 1
    assert crawler.stats.failed == 1  # the 404 (a robots denial is not a failure)


async def test_a_mock_handler_answers_from_a_function_and_may_redirect() -> None:
    def respond(request: Request) -> Response:
        if request.url.endswith("/old"):
            headers = CIMultiDict({"Location": "/new"})
            return Response(request.url, 301, headers, b"", request)
        body = b"<title>t</title>"
        return Response(request.url, 200, CIMultiDict({"Content-Type": "text/html"}), body, request)

    class Moved(Spider):
        name = "moved"
        start_urls = ("http://site.test/old",)

        def parse(self, response: Response) -> Iterator[Any]:
            yield {"url": response.url}

    crawler = Crawler(
        Moved(),
        Settings(obey_robots=False, progress_interval=0),
        download_handler=MockHandler(respond),
    )
    items: list[Any] = []
    crawler.items.subscribe(items.append)
    await crawler.run()
    assert items == [{"url": "http://site.test/new"}]


async def test_network_errors_arrive_as_netdisco_errors_with_their_reason() -> None:
    """A refused connection: aiohttp's error is translated at the handler, retried, and
    reported with aiohttp's reason, as before the seam."""
    port = free_port()

    class Refused(Spider):
        name = "refused"
        start_urls = (f"http://127.0.0.1:{port}/",)

        def parse(self, response: Response) -> Iterator[Any]:
            yield {}

    crawler = Crawler(
        Refused(), Settings(obey_robots=False, retries=1, retry_backoff=0.01, progress_interval=0)
    )
    await crawler.run()
    assert crawler.stats.failed == 1
    assert crawler.stats.retried == 1  # a refused connection is worth one more try
    assert "ClientConnectorError" in (crawler.stats.last_error or "")


def test_no_aiohttp_error_is_caught_above_the_handler() -> None:
    """Only transport.py names aiohttp's exceptions; the downloader, robots.txt and the
    middlewares see netdisco's."""
    offenders = []
    for path in CRAWL.rglob("*.py"):
        if path.name == "transport.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                caught = ast.unparse(node.type)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
                caught = ast.unparse(node.args[1])
            else:
                continue
            if "aiohttp" in caught:
                offenders.append(f"{path.relative_to(CRAWL)}:{node.lineno}: {caught}")
    assert offenders == []
