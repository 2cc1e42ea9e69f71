"""Downloader middleware on loopback servers: the built-ins, the order, and bad middlewares."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

import aiohttp
import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.crawl.middleware import (
    Chain,
    Middleware,
    ProxyRotation,
    build_middlewares,
    load_middleware,
)
from netdisco.exceptions import ConfigError
from netdisco.testing import free_port, serve
from tests.netdisco.sites import linking_app

PAGES = 6


def fan(path: str) -> list[str]:
    """/ links to /p/0..5, the pages to nothing."""
    return [f"/p/{n}" for n in range(PAGES)] if path == "/" else []


def site_app(seen: list[dict[str, str]]) -> web.Application:
    """Every request's path and headers (names in lower case) go to ``seen``."""

    def record(request: web.Request) -> None:
        seen.append({"path": request.path, **{k.lower(): v for k, v in request.headers.items()}})

    return linking_app(fan, record)


class Pages(Spider):
    name = "pages"
    custom_settings: ClassVar[dict[str, Any]] = {"obey_robots": False, "retry_backoff": 0.01}

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.recorded: list[str] = []

    async def start(self) -> AsyncIterator[Request]:
        yield Request(self.url + "/", callback=self.parse)

    def parse(self, response: Response) -> Any:
        self.recorded.append(response.url)
        yield {"url": response.url}
        yield from response.follow_all(css="a")


def settings(**values: Any) -> Settings:
    return Settings(obey_robots=False, retry_backoff=0.01, progress_interval=0).replace(**values)


async def crawl(spider: Spider, **values: Any) -> Crawler:
    crawler = Crawler(spider, settings(**values))
    await crawler.run()
    return crawler


async def test_default_headers_and_user_agents_rotate_unless_the_request_sets_its_own() -> None:
    seen: list[dict[str, str]] = []
    async with serve(site_app(seen)) as url:

        class Own(Pages):
            async def start(self) -> AsyncIterator[Request]:
                yield Request(url + "/", headers={"accept-language": "de", "User-Agent": "mine"})

        crawler = await crawl(
            Own(url),
            default_headers=("Accept-Language: fr", "X-Team: crawl"),
            user_agents=("agent-a", "agent-b"),
        )
    assert crawler.stats.succeeded == PAGES + 1
    first, rest = seen[0], seen[1:]
    assert (first["accept-language"], first["user-agent"], first["x-team"]) == (
        "de",
        "mine",
        "crawl",
    )
    assert {h["user-agent"] for h in rest} == {"agent-a", "agent-b"}
    assert {h["accept-language"] for h in rest} == {"fr"}
    assert crawler.downloader.chain.names == ["DefaultHeaders", "UserAgentRotation"]


def cookie_app() -> web.Application:
    """/login sets a cookie and redirects to /home, which shows a link only to a cookie holder."""

    async def login(request: web.Request) -> web.Response:
        response = web.HTTPFound("/home")
        response.set_cookie("session", "s3cret", path="/")
        raise response

    async def home(request: web.Request) -> web.Response:
        logged_in = request.cookies.get("session") == "s3cret"
        body = '<a href="/private">private</a>' if logged_in else "please log in"
        return web.Response(text=body, content_type="text/html")

    async def private(request: web.Request) -> web.Response:
        if request.cookies.get("session") != "s3cret":
            raise web.HTTPForbidden()
        return web.Response(text="the secret", content_type="text/html")

    app = web.Application()
    app.router.add_get("/login", login)
    app.router.add_get("/home", home)
    app.router.add_get("/private", private)
    return app


@pytest.mark.parametrize("cookies", [True, False])
async def test_the_cookie_jar_is_opt_in_and_keeps_cookies_set_on_a_redirect(cookies: bool) -> None:
    async with serve(cookie_app()) as url:

        class Login(Pages):
            async def start(self) -> AsyncIterator[Request]:
                yield Request(url + "/login", callback=self.parse)

        spider = Login(url)
        crawler = await crawl(spider, cookies=cookies)
    expected = [url + "/home", url + "/private"] if cookies else [url + "/home"]
    assert sorted(spider.recorded) == expected
    assert ("Cookies" in crawler.downloader.chain.names) is cookies


def proxy_app(used: list[str]) -> web.Application:
    """A forward HTTP proxy of our own: absolute-form requests are fetched and relayed."""

    async def relay(request: web.Request) -> web.Response:
        used.append(str(request.url))
        async with (
            aiohttp.ClientSession() as session,
            session.get(str(request.url), headers={"User-Agent": "relay"}) as upstream,
        ):
            body = await upstream.read()
            return web.Response(body=body, status=upstream.status, content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", relay)
    return app


async def test_proxies_rotate_and_a_dead_proxy_backs_off() -> None:
    seen: list[dict[str, str]] = []
    used: list[str] = []
    dead = f"http://127.0.0.3:{free_port('127.0.0.3')}"  # nothing listens there
    async with (
        serve(site_app(seen), host="127.0.0.2") as url,
        serve(proxy_app(used), host="127.0.0.4") as proxy,
    ):
        crawler = await crawl(Pages(url), proxies=(dead, proxy), retries=3, concurrency=1)
    assert crawler.stats.succeeded == PAGES + 1
    assert sorted(used) == sorted([url + "/", *(f"{url}/p/{n}" for n in range(PAGES))])
    rotation = next(m for m in crawler.downloader.middlewares if isinstance(m, ProxyRotation))
    assert rotation.failures == {dead: 1, proxy: 0}
    assert crawler.stats.retried == 1  # the dead one was tried once, then left to rest


class Recorder(Middleware):
    """Appends its label to ``request.meta["trail"]`` on the way down and up."""

    def __init__(self, label: str = "setting") -> None:
        self.label = label

    async def process_request(self, request: Request, spider: Spider) -> None:
        request.meta.setdefault("trail", []).append(f"{self.label}>")

    async def process_response(
        self, request: Request, response: Response, spider: Spider
    ) -> Response:
        request.meta["trail"].append(f"<{self.label}")
        return response


class Answering(Middleware):
    """Answers /p/0 itself, without a download."""

    async def process_request(self, request: Request, spider: Spider) -> Response | None:
        if request.url.endswith("/p/0"):
            return Response(request.url, 200, {"Content-Type": "text/html"}, b"from cache", request)
        return None


async def test_the_chain_runs_in_its_documented_order_and_may_answer_itself() -> None:
    seen: list[dict[str, str]] = []
    async with serve(site_app(seen)) as url:

        class Ordered(Pages):
            def middlewares(self) -> list[Middleware]:
                return [Recorder("spider"), Answering()]

            def parse(self, response: Response) -> Any:
                yield {"trail": response.meta["trail"], "body": response.text, "url": response.url}
                yield from response.follow_all(css="a")

        items: list[dict[str, Any]] = []
        spider = Ordered(url)
        crawler = Crawler(
            spider,
            settings(middlewares=("tests.netdisco.test_middleware:Recorder",), user_agents=("ua",)),
        )
        crawler.items.subscribe(items.append)
        await crawler.run()
    names = crawler.downloader.chain.names
    assert names == ["UserAgentRotation", "Recorder", "Recorder", "Answering"]
    answered = next(i for i in items if i["url"].endswith("/p/0"))
    assert answered["body"] == "from cache"
    assert all(i["trail"][:2] == ["setting>", "spider>"] for i in items)
    assert all(i["trail"][-2:] == ["<spider", "<setting"] for i in items)
    assert "/p/0" not in {h["path"] for h in seen}


class Raising(Middleware):
    async def process_request(self, request: Request, spider: Spider) -> None:
        if request.url.endswith("/p/2"):
            raise KeyError("no such key")


class WrongType(Middleware):
    async def process_response(self, request: Request, response: Response, spider: Spider) -> Any:
        return "not a response" if request.url.endswith("/p/3") else response


async def test_a_middleware_that_raises_or_returns_the_wrong_type_fails_only_its_request() -> None:
    seen: list[dict[str, str]] = []
    failures: list[BaseException] = []
    async with serve(site_app(seen)) as url:

        class Bad(Pages):
            def middlewares(self) -> list[Middleware]:
                return [Raising(), WrongType()]

            async def start(self) -> AsyncIterator[Request]:
                yield Request(url + "/", errback=self.failed)

            def failed(self, request: Request, exc: BaseException) -> None:
                failures.append(exc)

            def parse(self, response: Response) -> Any:
                for link in response.follow_all(css="a"):
                    link.errback = self.failed
                    yield link

        crawler = await crawl(Bad(url))
    assert crawler.stats.succeeded == PAGES + 1 - 2
    assert (crawler.stats.failed, crawler.stats.middleware_errors) == (2, 2)
    messages = sorted(str(exc) for exc in failures)
    assert messages[0] == "middleware Raising.process_request raised KeyError('no such key')"
    assert messages[1] == "middleware WrongType.process_response returned str, expected a Response"
    assert any(isinstance(exc, TypeError) for exc in failures)
    assert {exc.url for exc in failures} == {f"{url}/p/2", f"{url}/p/3"}  # type: ignore[attr-defined]


class Recovering(Middleware):
    async def process_exception(
        self, request: Request, exc: BaseException, spider: Spider
    ) -> Response | None:
        return Response(request.url, 200, {}, b"stand-in", request)


async def test_process_exception_may_stand_in_for_a_failed_download() -> None:
    port = free_port()

    class Unreachable(Spider):
        name = "unreachable"
        start_urls = (f"http://127.0.0.1:{port}/",)

        def middlewares(self) -> list[Middleware]:
            return [Recovering()]

        def parse(self, response: Response) -> Any:
            yield {"body": response.text}

    items: list[dict[str, Any]] = []
    crawler = Crawler(Unreachable(), settings())
    crawler.items.subscribe(items.append)
    await crawler.run()
    assert items == [{"body": "stand-in"}]


def test_a_sync_hook_or_a_bad_import_path_is_refused_by_name() -> None:
    class Sync(Middleware):
        def process_request(self, request: Request, spider: Spider) -> None:  # type: ignore[override]
            return None

    async def download(request: Request) -> Response:
        raise AssertionError("not called")

    with pytest.raises(TypeError, match=r"middleware Sync.process_request must be an async def"):
        Chain([Sync()], Spider(), download)
    with pytest.raises(ConfigError, match=r"middlewares: cannot load 'tests.nowhere:Thing'"):
        load_middleware("tests.nowhere:Thing")
    with pytest.raises(ConfigError, match=r"not a Middleware"):
        load_middleware("collections:OrderedDict")
    with pytest.raises(ConfigError, match=r"proxies: expected an http"):
        settings(proxies=("socks5://127.0.0.1:1",))
    with pytest.raises(ConfigError, match=r"default_headers: expected 'Name: value'"):
        settings(default_headers=("no colon",))
    assert build_middlewares(settings(), Spider()) == []
