"""The crawl as a whole: callbacks, seeds, push, lifecycle controls, status; real site."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from netdisco import (
    Crawler,
    JsonLinesPipeline,
    Pipeline,
    Request,
    Response,
    Settings,
    Spider,
    SpiderState,
)
from netdisco.crawl.request import Callback
from netdisco.exceptions import InvalidTransition, RequestError
from netdisco.frontiers import MemoryFrontier
from netdisco.testing import eventually
from tests.netdisco.sites import FAST, Site, crawl, running_site, seeds


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


class Raising(Spider):
    """Yields an item and a link, then raises on /tree/1; other pages are fine."""

    name = "raising"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}
        yield from response.follow_all(css="a")
        if response.url.endswith("/tree/1"):
            raise RuntimeError("bug in parse")


async def test_callback_error_is_counted_logged_and_the_crawl_goes_on(site: Site) -> None:
    with capture_logs() as logs:
        crawler, items = await crawl(Raising(start_urls=[site.url("/tree/0")]), concurrency=1)
    assert crawler.stats.callback_errors == 1
    assert len(items) == site.tree_size  # the item and links yielded before the error were kept
    errors = [entry for entry in logs if entry["event"] == "callback_error"]
    assert len(errors) == 1
    assert errors[0]["url"] == site.url("/tree/1")
    assert "bug in parse" in errors[0]["error"]
    assert errors[0]["log_level"] == "error"
    assert crawler.state is SpiderState.FINISHED


class Shapes(Spider):
    """Every shape a callback may have: sync and async generators, coroutine, list, dict, None."""

    name = "shapes"

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"shape": "sync generator"}
        callbacks: tuple[Callback, ...] = (
            self.agen,
            self.coroutine,
            self.listing,
            self.single,
            self.nothing,
        )
        for n, callback in enumerate(callbacks, start=10):
            yield response.follow(f"/tree/{n}", callback=callback)

    async def agen(self, response: Response) -> AsyncIterator[Any]:
        await asyncio.sleep(0)
        yield {"shape": "async generator"}

    async def coroutine(self, response: Response) -> list[Any]:
        await asyncio.sleep(0)
        return [{"shape": "coroutine"}, None]

    def listing(self, response: Response) -> list[Any]:
        return [{"shape": "list"}]

    def single(self, response: Response) -> dict[str, str]:
        return {"shape": "dict"}

    def nothing(self, response: Response) -> None:
        return None


async def test_every_callback_shape(site: Site) -> None:
    crawler, items = await crawl(Shapes(start_urls=[site.url("/page")]))
    assert sorted(item["shape"] for item in items) == sorted(
        ["sync generator", "async generator", "coroutine", "list", "dict"]
    )
    assert (crawler.stats.succeeded, crawler.stats.callback_errors) == (6, 0)


class Seeds(Spider):
    """Seeds from an async start() that fails after two requests."""

    name = "seeds"
    base = ""

    async def start(self) -> AsyncIterator[Request]:
        for n in (13, 14):
            yield Request(f"{self.base}/tree/{n}", callback=self.parse)
        raise RuntimeError("seed source broke")

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"url": response.url}


async def test_async_start_and_a_failing_seed_source(site: Site) -> None:
    crawler, items = await crawl(Seeds(base=site.base))
    assert sorted(item["url"] for item in items) == [site.url("/tree/13"), site.url("/tree/14")]
    assert crawler.stats.callback_errors == 1
    assert "seed source broke" in (crawler.stats.last_error or "")
    assert crawler.state is SpiderState.FAILED  # the seeds it gave crawled, then failed
    assert "seed source broke" in repr(crawler.failure)


class WithErrback(Spider):
    """Routes failures to an errback that yields an item describing them."""

    name = "errback"
    base = ""

    async def start(self) -> AsyncIterator[Request]:
        for path in ("/status/404", "/tree/14"):
            yield Request(f"{self.base}{path}", callback=self.parse, errback=self.failed)

    def parse(self, response: Response) -> Iterator[Any]:
        yield {"ok": response.url}

    def failed(self, request: Request, error: BaseException) -> Iterator[Any]:
        assert isinstance(error, RequestError)
        yield {"failed": request.url, "error": str(error)}


async def test_errback_gets_the_failure(site: Site) -> None:
    crawler, items = await crawl(WithErrback(base=site.base))
    assert sorted(items, key=str) == sorted(
        [{"ok": site.url("/tree/14")}, {"failed": site.url("/status/404"), "error": "HTTP 404"}],
        key=str,
    )
    assert crawler.stats.failed == 1


async def test_push_says_why_urls_are_refused(site: Site) -> None:
    crawler = Crawler(seeds(allowed_domains=["127.0.0.1"]), Settings(**FAST))
    good = site.url("/tree/13")
    result = await crawler.push(
        [
            good,
            good + "#again",
            "ftp://127.0.0.1/x",
            "not a url",
            "http://elsewhere.test/",
            "http://[::1/",
        ]
    )
    assert result.accepted == [good]
    reasons = dict(result.rejected)
    assert reasons[good + "#again"] == "already seen"
    assert reasons["ftp://127.0.0.1/x"] == "unsupported scheme 'ftp'"
    assert reasons["not a url"].startswith("malformed URL")
    assert "not in allowed_domains" in reasons["http://elsewhere.test/"]
    assert reasons["http://[::1/"].startswith("malformed URL")
    assert (crawler.stats.invalid, crawler.stats.filtered) == (3, 2)
    await asyncio.wait_for(crawler.run(), 30)
    assert crawler.stats.succeeded == 1
    with pytest.raises(InvalidTransition, match="cannot push while finished"):
        await crawler.push([good])


async def test_invalid_transitions_are_errors(site: Site) -> None:
    crawler = Crawler(seeds(site.url("/tree/14")), Settings(**FAST))
    with pytest.raises(InvalidTransition, match="spider 'pages' cannot pause while idle"):
        crawler.pause()
    with pytest.raises(InvalidTransition, match="cannot stop while idle"):
        await crawler.stop()
    await crawler.start()
    with pytest.raises(InvalidTransition, match="cannot start while running") as caught:
        await crawler.start()
    assert (caught.value.state, caught.value.action) == ("running", "start")
    with pytest.raises(InvalidTransition, match="cannot resume while running"):
        crawler.resume()
    assert await asyncio.wait_for(crawler.wait(), 30) is SpiderState.FINISHED
    for control in (crawler.pause, crawler.resume):
        with pytest.raises(InvalidTransition, match="while finished"):
            control()
    with pytest.raises(InvalidTransition, match="cannot stop while finished"):
        await crawler.stop()


def parked_on(event: asyncio.Event) -> int:
    """How many tasks wait on ``event`` now."""
    return len(getattr(event, "_waiters", ()))


def _slow_spider(site: Site, count: int, seconds: float) -> Spider:
    return seeds(*(site.url(f"/slow/{n}?s={seconds}") for n in range(count)))


async def test_pause_resume_and_stop(site: Site) -> None:
    crawler = Crawler(_slow_spider(site, 12, 0.1), Settings(concurrency=2, **FAST))
    states: list[str] = []
    crawler.add_listener(lambda c: states.append(c.state.value))
    await crawler.start()
    await eventually(lambda: crawler.stats.succeeded >= 2, "two pages")
    assert crawler.pause() is SpiderState.PAUSED
    await eventually(lambda: crawler.stats.in_flight == 0, "in-flight requests to finish")
    fetched = len(site.paths("/slow/"))
    # paused: both workers come to wait on the pause itself, so nothing new may start
    paused = crawler.phase._dispatching
    await eventually(lambda: parked_on(paused) == 2, "workers paused", timeout=30)
    assert len(site.paths("/slow/")) == fetched
    assert crawler.stats.in_flight == 0
    assert crawler.resume() is SpiderState.RUNNING
    await eventually(lambda: len(site.paths("/slow/")) > fetched, "the crawl to go on")
    assert crawler.pause() is SpiderState.PAUSED
    assert await asyncio.wait_for(crawler.stop(), 30) is SpiderState.STOPPED
    assert states[:6] == ["starting", "running", "paused", "running", "paused", "stopping"]
    assert states[-1] == "stopped"
    assert crawler.stats.succeeded < 12
    assert crawler.status()["queue_size"] == 12 - crawler.stats.succeeded


async def test_stop_waits_for_in_flight_requests_within_the_deadline(site: Site) -> None:
    crawler = Crawler(_slow_spider(site, 6, 0.3), Settings(concurrency=2, **FAST))
    items: list[Any] = []
    crawler.items.subscribe(items.append)
    await crawler.start()
    await eventually(lambda: crawler.stats.in_flight == 2, "two requests in flight")
    assert await asyncio.wait_for(crawler.stop(deadline=10), 30) is SpiderState.STOPPED
    assert crawler.stats.succeeded == len(items) >= 2  # the two in flight finished
    assert crawler.stats.succeeded < 6


async def test_stop_deadline_cancels_slow_requests(site: Site) -> None:
    crawler = Crawler(seeds(site.url("/never"), site.url("/slow/1?s=3600")), Settings(**FAST))
    await crawler.start()
    await eventually(
        lambda: site.count("/never") == 1 and site.count("/slow/1?s=3600") == 1, "both requests"
    )
    assert await asyncio.wait_for(crawler.stop(deadline=0.2), 10) is SpiderState.STOPPED
    assert (crawler.stats.in_flight, crawler.stats.succeeded, crawler.stats.failed) == (0, 0, 0)
    await eventually(lambda: not site.active["127.0.0.1"], "the server to see the requests go")
    assert crawler.status()["queue_size"] == 2  # cancelled requests were put back


async def test_status_object(site: Site) -> None:
    crawler, _ = await crawl(seeds(site.url("/tree/0")))
    status = crawler.status()
    for key in ("name", "state", "started_at", "scheduled", "in_flight", "succeeded", "failed",
                "retried", "filtered", "items", "bytes", "queue_size", "seen",
                "pages_per_second", "last_error"):  # fmt: skip
        assert key in status
    assert (status["name"], status["state"], status["succeeded"], status["seen"]) == (
        "pages",
        "finished",
        15,
        15,
    )
    assert status["bytes"] > 0
    assert status["queue_size"] == status["in_flight"] == 0


class Custom(Spider):
    name = "custom"
    custom_settings = {"concurrency": 3, "obey_robots": False}  # noqa: RUF012 - Spider API


def test_custom_settings_are_the_default() -> None:
    crawler = Crawler(Custom())
    assert (crawler.settings.concurrency, crawler.settings.obey_robots) == (3, False)


class Stuck(Pipeline):
    """An async pipeline that never finishes an item (a hung database, say)."""

    def __init__(self) -> None:
        self.started = 0
        self.closed = False

    async def process(self, item: Any) -> None:
        self.started += 1
        await asyncio.Event().wait()

    async def close(self) -> None:
        self.closed = True


async def test_stop_deadline_also_bounds_hung_pipeline_work(site: Site) -> None:
    stuck = Stuck()
    crawler = Crawler(
        seeds(site.url("/tree/0")), Settings(item_buffer=2, **FAST), pipelines=[stuck]
    )
    await crawler.start()
    await eventually(lambda: stuck.started == 2, "the pipeline to hang")
    assert await asyncio.wait_for(crawler.stop(deadline=0.2), 10) is SpiderState.STOPPED
    assert stuck.closed


async def test_a_pipeline_that_cannot_open_fails_the_spider(site: Site, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    out = JsonLinesPipeline(tmp_path / "file" / "items.jsonl")
    crawler = Crawler(seeds(site.url("/tree/0")), Settings(**FAST), pipelines=[out])
    assert await asyncio.wait_for(crawler.run(), 10) is crawler.stats
    assert crawler.state is SpiderState.FAILED
    assert "spider failed" in (crawler.stats.last_error or "")
    assert site.paths("/tree/") == []


async def test_progress_lines(site: Site) -> None:
    with capture_logs() as logs:
        await crawl(_slow_spider(site, 8, 0.2), concurrency=2, progress_interval=0.5)
    progress = [entry for entry in logs if entry["event"] == "progress"]
    assert progress
    assert {"pages", "pages_per_second", "queue", "in_flight"} <= set(progress[0])
    assert progress[-1]["pages"] >= progress[0]["pages"]


class Breaking(MemoryFrontier[Request]):
    """Takes the seeds, then cannot queue anything (a frontier's unforeseen error)."""

    def __init__(self) -> None:
        super().__init__()
        self.acked: list[str] = []

    async def add(self, requests: Sequence[Request]) -> list[bool]:
        if self._seen:
            raise RuntimeError("frontier broke")
        return await super().add(requests)

    async def done(self, request: Request, *, requeue: bool = False) -> None:
        if not requeue:
            self.acked.append(request.url)
        await super().done(request, requeue=requeue)


async def test_a_frontier_that_cannot_queue_a_pages_links_fails_the_crawl(site: Site) -> None:
    """The page is not counted failed and acknowledged: its links would be lost."""
    frontier = Breaking()
    spider = Raising(start_urls=[site.url("/tree/0")])
    crawler = Crawler(spider, Settings(**FAST), frontier=frontier)
    await asyncio.wait_for(crawler.run(), 30)
    assert crawler.state is SpiderState.FAILED
    assert "frontier broke" in (crawler.stats.last_error or "")
    assert frontier.acked == []
    assert crawler.stats.failed == 0
