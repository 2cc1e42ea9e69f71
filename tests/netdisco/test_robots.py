"""robots.txt as RFC 9309 asks, against real servers on loopback: an unreachable file
holds its host's requests (they wait, then go, or are handed back at stop), a success
is trusted for ``robots_max_age`` only. Backoffs are tiny here; the defaults are minutes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from netdisco import CallablePipeline, Crawler, DownloadHandler, Request, Settings
from netdisco.testing import eventually, serve
from tests.netdisco.pace_support import timeout_only_for
from tests.netdisco.sites import FAST, Site, running_site, seeds

#: host_error_limit 0: these tests watch an unreachable robots.txt being waited out
QUICK = {**FAST, "robots_backoff": 0.05, "robots_max_backoff": 0.2, "progress_interval": 0,
         "host_error_limit": 0}  # fmt: skip


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


def start(
    spider: Any, handler: DownloadHandler | None = None, **settings: Any
) -> tuple[Crawler, list[Any]]:
    items: list[Any] = []
    crawler = Crawler(
        spider,
        Settings(**{**QUICK, **settings}),
        pipelines=[CallablePipeline(items.append)],
        download_handler=handler,
    )
    return crawler, items


def short_timeout(**settings: Any) -> Settings:
    """The crawl's settings, for ``timeout_only_for``: its ``timeout`` is short."""
    return Settings(**{**QUICK, **settings})


def on(base: str) -> Callable[[Request], bool]:
    """Whether a request goes to ``base`` (its host alone races the short timeout)."""
    return lambda request: request.url.startswith(base + "/")


async def test_a_5xx_robots_holds_the_host_until_it_recovers(site: Site) -> None:
    site.robots_status = 503
    crawler, items = start(seeds(site.url("/tree/0")))
    with capture_logs() as logs:
        await crawler.start()
        await eventually(lambda: site.count("/robots.txt") >= 5, "robots.txt asked again")
        assert site.paths("/tree/") == []  # nothing fetched while robots.txt is unreachable
        assert (crawler.stats.robots_blocked, crawler.stats.failed) == (0, 0)
        assert crawler.state.value == "running"  # waiting, not finished
        site.robots_status = 200
        await asyncio.wait_for(crawler.wait(), 30)
    assert crawler.state.value == "finished"
    assert len(items) == site.tree_size
    delays = [e["retry_in"] for e in logs if e["event"] == "robots_unreachable"]
    assert delays[:4] == [0.05, 0.1, 0.2, 0.2]  # doubling, capped


async def test_a_robots_timeout_is_unreachable_too() -> None:
    state = {"hang": True}
    done = asyncio.Event()

    async def robots(request: web.Request) -> web.Response:
        if state["hang"]:
            await asyncio.wait([asyncio.ensure_future(done.wait())], timeout=30)
        return web.Response(text="User-agent: *\nDisallow: /no\n")

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<h1>yes</h1>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/robots.txt", robots)
    app.router.add_get("/{tail:.*}", page)
    # only robots.txt races the 0.3 s: the pages answer whatever the machine's load
    robots_only = short_timeout(timeout=0.3)
    async with (
        serve(app) as base,
        timeout_only_for(robots_only, lambda r: r.url.endswith("/robots.txt")) as handler,
    ):
        crawler, items = start(seeds(f"{base}/yes", f"{base}/no"), handler, timeout=0.3)
        await crawler.start()
        await eventually(
            lambda: crawler.downloader.robots and crawler.downloader.robots.fetches >= 2
        )
        assert items == []
        state["hang"] = False
        await asyncio.wait_for(crawler.wait(), 30)
        done.set()
    assert [item["title"] for item in items] == ["yes"]
    assert crawler.stats.robots_blocked == 1


async def test_requests_waiting_at_stop_are_handed_back_and_counted(site: Site) -> None:
    site.robots_status = 500
    urls = [site.url(f"/tree/{n}") for n in range(6)]
    crawler, _ = start(seeds(*urls), concurrency=2, stop_deadline=0.2)
    await crawler.start()
    await eventually(lambda: site.count("/robots.txt") >= 2)
    await eventually(lambda: crawler.stats.scheduled == 6)
    assert await crawler.stop() == "stopped"
    queued, leased, _ = await crawler.frontier.counts()
    assert (queued, leased) == (6, 0)  # every request is back in the frontier
    # the requests taken (two workers wait on robots.txt, the rest may be parked) are counted
    assert 2 <= crawler.stats.robots_deferred <= 6
    assert (crawler.stats.failed, crawler.stats.robots_blocked, crawler.stats.succeeded) == (
        0,
        0,
        0,
    )


async def test_a_fetched_robots_is_trusted_for_max_age_only(site: Site) -> None:
    urls = [site.url(f"/slow/{n}?s=0.1") for n in range(8)]
    crawler, items = start(seeds(*urls), concurrency=1, robots_max_age=0.05)
    await crawler.start()
    await eventually(lambda: len(site.paths("/slow/")) >= 2)
    site.robots = "User-agent: *\nDisallow: /slow/\n"
    await asyncio.wait_for(crawler.wait(), 30)
    assert site.count("/robots.txt") >= 3
    assert crawler.stats.robots_blocked >= 1
    assert len(items) + crawler.stats.robots_blocked == 8


@pytest.fixture
async def dead_host() -> AsyncIterator[str]:
    """A loopback TCP server that accepts every connection and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


def _linking(dead: str, links: int) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        hrefs = "".join(f'<a href="{dead}/p{n}">{n}</a>' for n in range(links))
        return web.Response(text=f"<h1>home</h1>{hrefs}", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    return app


@pytest.mark.parametrize("obey", [True, False], ids=["robots", "requests"])
async def test_a_host_that_never_answers_is_given_up_and_the_crawl_ends(
    dead_host: str, obey: bool
) -> None:
    limits = {"timeout": 0.3, "retries": 0, "host_error_limit": 3, "obey_robots": obey}
    # the dead host alone races the 0.3 s: the live one has a generous timeout
    async with (
        serve(_linking(dead_host, 12)) as base,
        timeout_only_for(short_timeout(**limits), on(dead_host)) as handler,
    ):
        crawler, items = start(seeds(f"{base}/"), handler, **limits, per_host_concurrency=1)
        with capture_logs() as logs:
            await asyncio.wait_for(crawler.run(), 20)
    assert crawler.state.value == "finished"
    assert [item["title"] for item in items] == ["home"]
    assert crawler.stats.failed == 12  # every request of the dead host, with the reason
    given_up = [e for e in logs if e["event"] in ("robots_given_up", "host_given_up")]
    assert len(given_up) == 1
    assert "in a row" in str(crawler.stats.last_error)  # the later ones: given up


async def test_a_host_that_never_answers_is_given_up_in_time_not_by_count(dead_host: str) -> None:
    """robots.txt backing off as by default (60 s, doubled) would keep the crawl open for
    many minutes; ``host_give_up_after`` ends it, the last try timed to end by then.

    The schedule is read as the crawl decided it (its log), not timed on its loop."""
    limits = {"timeout": 0.5, "robots_backoff": 60.0, "host_give_up_after": 2.0}
    async with (
        serve(_linking(dead_host, 4)) as base,
        timeout_only_for(short_timeout(**limits), on(dead_host)) as handler,
    ):
        crawler, _ = start(seeds(f"{base}/"), handler, **limits)
        with capture_logs() as logs:
            await asyncio.wait_for(crawler.run(), 30)  # not minutes: not the 60 s back-off
    assert crawler.state.value == "finished"
    assert crawler.stats.failed == 4  # every request of the dead host, with the reason
    # the next try after a 0.5 s timeout waits the 2 s less the timeout, less what passed
    # since the first try began: at most 1 s, never the 60 s back-off
    waits = [e["retry_in"] for e in logs if e["event"] == "robots_unreachable"]
    assert all(0 <= wait <= 1.0 for wait in waits), waits
    (given_up,) = [e["reason"] for e in logs if e["event"] == "robots_given_up"]
    assert given_up.endswith("tries; host_give_up_after)")  # in time, not by count
    # given up once 2 s minus a last try's timeout had passed, rounded: not before
    waited = re.search(r"did not answer for (\d+) s", str(crawler.stats.last_error))
    assert waited is not None
    assert int(waited[1]) >= 2


def test_a_dead_host_is_given_up_within_two_minutes_by_default() -> None:
    assert Settings().host_give_up_after == 120.0
