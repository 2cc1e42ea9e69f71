"""A real HTTP test site on loopback with a route for every crawl case, and a raw TCP server.

``Site`` runs an aiohttp application inside the test's loop and records every
request (host, path and query, monotonic time) and the peak number of requests
in flight per host, so tests assert on what the server saw, not on timings.
It also answers absolute-form requests, so it doubles as an HTTP proxy for
virtual hosts such as ``shop.example.test`` (subdomain tests without DNS).

``RawServer`` speaks broken HTTP on purpose (truncated bodies, garbage).
"""

# ruff: noqa: RUF001 - the CJK sample texts use full-width punctuation on purpose
from __future__ import annotations

import asyncio
import gzip
import importlib.util
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from netdisco import CallablePipeline, Crawler, Pipeline, Response, Settings, Spider

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: realistic multi-sentence text, so that charset detection has something to go on
TEXTS = {
    "gbk": (
        "北京是中华人民共和国的首都，也是全国的政治、文化和国际交往中心。"
        "这座城市有三千多年的建城史和八百多年的建都史。"
        "故宫、天坛和颐和园每年吸引数以百万计的游客。"
        "春天的时候，公园里开满了桃花和玉兰花，人们喜欢在周末去郊外爬山。"
    ),
    "shift_jis": (
        "東京は日本の首都であり、世界でも有数の大都市です。"
        "毎年春になると、上野公園や新宿御苑では桜が満開になり、多くの人々が花見を楽しみます。"
        "電車の路線は非常に複雑ですが、時間通りに運行されることで有名です。"
        "古い寺院と近代的な高層ビルが並ぶ街並みは、訪れる人に強い印象を与えます。"
    ),
    "latin-1": (
        "L'été dernier, nous sommes allés à la côte bretonne avec toute la famille. "
        "Les crêpes étaient délicieuses et le cidre très rafraîchissant. "
        "Après une longue promenade sur la plage, nous avons dîné dans un petit café où "
        "le garçon parlait français, anglais et même un peu d'allemand : « Grüß Gott, "
        "schönes Wetter heute, nicht wahr ? » Ça nous a beaucoup amusés."
    ),
}


def load_example(name: str) -> Any:
    """The module ``examples/<name>.py``, loaded once (examples are files, not a package)."""
    key = f"netdisco_example_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, EXAMPLES / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


@dataclass(frozen=True)
class Hit:
    """One request as the server saw it."""

    host: str
    path: str
    at: float
    agent: str


def _links(hrefs: Sequence[str]) -> str:
    return "".join(f'<a href="{h}">{h}</a>' for h in hrefs)


def html(title: str, *hrefs: str, body: str = "") -> web.Response:
    """A small HTML page with an <h1> and links."""
    text = f"<html><body><h1>{title}</h1>{body}{_links(hrefs)}</body></html>"
    return web.Response(text=text, content_type="text/html")


def linking_app(
    links: Callable[[str], Sequence[str]], record: Callable[[web.Request], None] | None = None
) -> web.Application:
    """Every GET path answers a page linking to ``links(path)``; ``record`` sees each
    request first (and may raise an aiohttp HTTP exception: a redirect, an error)."""

    async def page(request: web.Request) -> web.Response:
        if record is not None:
            record(request)
        return html(request.path, *links(request.path))

    app = web.Application()
    app.router.add_get("/{path:.*}", page)
    return app


class Site:
    """The test site; see the module docstring. ``tree_size`` bounds the /tree pages."""

    def __init__(self) -> None:
        self.hits: list[Hit] = []
        self.robots = "User-agent: *\nDisallow: /private/\n"
        self.robots_status = 200
        self.tree_size = 15
        self.active: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.peak_total = 0
        self.closing = asyncio.Event()
        self.base = ""
        self.observers: list[Any] = []

    def url(self, path: str) -> str:
        """An absolute URL on this site."""
        return self.base + path

    def count(self, path: str, host: str | None = None) -> int:
        """How many requests asked for exactly ``path`` (with its query)."""
        return sum(1 for h in self.hits if h.path == path and (host is None or h.host == host))

    def times(self, prefix: str) -> list[float]:
        """When requests under ``prefix`` arrived, in order."""
        return [h.at for h in self.hits if h.path.startswith(prefix)]

    def paths(self, prefix: str = "/") -> list[str]:
        """Requested paths under ``prefix``, in arrival order."""
        return [h.path for h in self.hits if h.path.startswith(prefix)]

    @web.middleware
    async def record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Log the hit and track how many requests each host has in flight."""
        host = request.host.split(":")[0]
        agent = request.headers.get("User-Agent", "")
        self.hits.append(Hit(host, request.path_qs, time.monotonic(), agent))
        for observer in self.observers:
            observer(request.path_qs)
        self.active[host] += 1
        self.peak[host] = max(self.peak[host], self.active[host])
        self.peak_total = max(self.peak_total, sum(self.active.values()))
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            self.active[host] -= 1

    async def wait_closing(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the site shuts down (handlers never outlive a test)."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self.closing.wait(), seconds)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.record])
        routes = _Routes(self)
        for path, handler in routes.table():
            app.router.add_get(path, handler)
        app.add_subapp("/shop/", load_example("local_site").make_app())
        return app


class _Routes:
    """The handlers; each docstring says which case it serves."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.failures: Counter[str] = Counter()

    def table(self) -> list[tuple[str, Any]]:
        return [
            ("/robots.txt", self.robots),
            ("/tree/{n:\\d+}", self.tree),
            ("/slow/{n:\\d+}", self.slow),
            ("/never", self.never),
            ("/status/{code:\\d+}", self.status),
            ("/flaky/{key}", self.flaky),
            ("/retry-after/{key}", self.retry_after),
            ("/redirect/loop/{side}", self.loop),
            ("/redirect/chain/{n:\\d+}", self.chain),
            ("/redirect/to", self.redirect_to),
            ("/big", self.big),
            ("/big-chunked", self.big_chunked),
            ("/big-gzip", self.big_gzip),
            ("/enc/{codec}/{mode}", self.encoded),
            ("/private/{rest:.*}", self.tree),
            ("/page", self.page),
            ("/list/{n:\\d+}", self.listing),
        ]

    async def robots(self, request: web.Request) -> web.Response:
        """robots.txt: ``Site.robots`` (disallows /private/ by default)."""
        return web.Response(text=self.site.robots, status=self.site.robots_status)

    async def tree(self, request: web.Request) -> web.Response:
        """A binary tree of pages: /tree/N links to 2N+1 and 2N+2 (while < tree_size)."""
        n = int(request.match_info.get("n", "0"))
        children = [f"/tree/{c}" for c in (2 * n + 1, 2 * n + 2) if c < self.site.tree_size]
        return html(f"tree {n}", *children)

    async def slow(self, request: web.Request) -> web.Response:
        """A leaf page answered after ``?s=`` seconds (default 0.2)."""
        await self.site.wait_closing(float(request.query.get("s", "0.2")))
        return html(f"slow {request.match_info['n']}")

    async def never(self, request: web.Request) -> web.Response:
        """Never answers (until the site shuts down)."""
        await self.site.wait_closing(3600)
        return html("too late")

    async def status(self, request: web.Request) -> web.Response:
        """Answers with the status in the path."""
        return web.Response(status=int(request.match_info["code"]), text="status")

    async def flaky(self, request: web.Request) -> web.Response:
        """Fails ``?fail=`` times with ``?code=`` (default 503) per key, then succeeds."""
        key = request.match_info["key"]
        if self.failures[key] < int(request.query.get("fail", "2")):
            self.failures[key] += 1
            return web.Response(status=int(request.query.get("code", "503")), text="try again")
        return html(f"flaky {key} ok")

    async def retry_after(self, request: web.Request) -> web.Response:
        """429 with ``Retry-After: ?seconds=`` the first time per key, then a page."""
        key = request.match_info["key"]
        if not self.failures[key]:
            self.failures[key] += 1
            headers = {"Retry-After": request.query.get("seconds", "1")}
            return web.Response(status=429, headers=headers, text="slow down")
        return html(f"retry-after {key} ok")

    async def loop(self, request: web.Request) -> web.Response:
        """/redirect/loop/a -> b -> a ..."""
        other = "b" if request.match_info["side"] == "a" else "a"
        raise web.HTTPFound(f"/redirect/loop/{other}")

    async def chain(self, request: web.Request) -> web.Response:
        """/redirect/chain/N -> N-1 -> ... -> 0, which is a page."""
        n = int(request.match_info["n"])
        if n == 0:
            return html("chain end")
        raise web.HTTPMovedPermanently(f"/redirect/chain/{n - 1}")

    async def redirect_to(self, request: web.Request) -> web.Response:
        """302 to ``?url=``, verbatim (even when it is not a valid URL)."""
        return web.Response(status=302, headers={"Location": request.query["url"]})

    async def big(self, request: web.Request) -> web.Response:
        """``?size=`` bytes of HTML, with Content-Length."""
        return web.Response(body=_filler(int(request.query["size"])), content_type="text/html")

    async def big_chunked(self, request: web.Request) -> web.StreamResponse:
        """``?size=`` bytes, chunked (no Content-Length), in 16 KiB writes."""
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        body = _filler(int(request.query["size"]))
        for start in range(0, len(body), 16384):
            await response.write(body[start : start + 16384])
        await response.write_eof()
        return response

    async def big_gzip(self, request: web.Request) -> web.Response:
        """``?size=`` bytes once decompressed; a small gzip body with its own Content-Length."""
        body = gzip.compress(_filler(int(request.query["size"])))
        headers = {"Content-Encoding": "gzip", "Content-Type": "text/html"}
        return web.Response(body=body, headers=headers)

    async def encoded(self, request: web.Request) -> web.Response:
        """TEXTS[codec] encoded so; charset declared in the ``header``, a ``meta`` or ``none``."""
        codec, mode = request.match_info["codec"], request.match_info["mode"]
        head = f'<meta charset="{codec}">' if mode == "meta" else ""
        page = f"<html><head>{head}<title>t</title></head><body><p>{TEXTS[codec]}</p></body></html>"
        content_type = f"text/html; charset={codec}" if mode == "header" else "text/html"
        return web.Response(body=page.encode(codec), headers={"Content-Type": content_type})

    async def page(self, request: web.Request) -> web.Response:
        """A page linking to every ``?link=`` (for scope, dedup and invalid-URL cases)."""
        return html("page", *request.query.getall("link", []))

    async def listing(self, request: web.Request) -> web.Response:
        """Listing N of 3: two ``a.item`` links to /tree leaves, ``a.next`` to listing N+1."""
        n = int(request.match_info["n"])
        items = "".join(f'<a class="item" href="/tree/{10 + 2 * n + k}">item</a>' for k in range(2))
        after = f'<a class="next" href="/list/{n + 1}">next</a>' if n < 2 else ""
        return html(f"list {n}", body=items + after)


def _filler(size: int) -> bytes:
    unit = b"<p>netdisco filler text for size limits</p>\n"
    return (unit * (size // len(unit) + 1))[:size]


@asynccontextmanager
async def running_site() -> AsyncIterator[Site]:
    """Serve a fresh ``Site`` on a free loopback port in the running loop."""
    site = Site()
    runner = web.AppRunner(
        site.app(), access_log=None, handler_cancellation=True, shutdown_timeout=1
    )
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = runner.addresses[0][1]
    site.base = f"http://127.0.0.1:{port}"
    try:
        yield site
    finally:
        site.closing.set()
        await runner.cleanup()


class RawServer:
    """A TCP server that answers every connection with ``replies[path]`` bytes, then closes."""

    def __init__(self, replies: dict[str, bytes]) -> None:
        self.replies = replies
        self.requests: list[str] = []
        self.base = ""

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ")[1].decode()
        self.requests.append(path)
        writer.write(self.replies.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
        await writer.drain()
        writer.close()


@asynccontextmanager
async def running_raw(replies: dict[str, bytes]) -> AsyncIterator[RawServer]:
    """Serve ``RawServer(replies)`` on a free loopback port."""
    raw = RawServer(replies)
    server = await asyncio.start_server(raw._handle, "127.0.0.1", 0)
    raw.base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield raw
    finally:
        server.close()
        await server.wait_closed()


class PageSpider(Spider):
    """Yields ``{"url", "title"}`` per page and follows every link."""

    name = "pages"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url, "title": response.css("h1::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


#: settings that keep failure tests quick
FAST: dict[str, Any] = {"retry_backoff": 0.01, "timeout": 5.0, "connect_timeout": 2.0}


async def crawl(
    spider: Spider, *, pipelines: Sequence[Pipeline] = (), **settings: Any
) -> tuple[Crawler, list[Any]]:
    """Crawl to the end (bounded by a generous deadline); the crawler and its items."""
    items: list[Any] = []
    crawler = Crawler(
        spider,
        Settings(**{**FAST, **settings}),
        pipelines=[CallablePipeline(items.append), *pipelines],
    )
    await asyncio.wait_for(crawler.run(), 40)
    return crawler, items


def seeds(*urls: str, **kwargs: Any) -> PageSpider:
    """A PageSpider starting from ``urls`` (extra attributes as keyword arguments)."""
    return PageSpider(start_urls=list(urls), **kwargs)


class LoopbackServer:
    """A low-level aiohttp server on 127.0.0.1 (a free port) for a subclass's ``_handle``."""

    _runner: web.ServerRunner | None = None
    base = ""

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raise NotImplementedError

    async def start(self) -> str:
        runner = web.ServerRunner(web.Server(self._handle), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._runner = runner
        self.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        return self.base

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
