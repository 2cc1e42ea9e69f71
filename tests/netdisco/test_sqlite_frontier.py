"""The SQLite frontier in process: what a reopened state holds, and what it keeps."""

from __future__ import annotations

from pathlib import Path

from netdisco import Spider
from netdisco.crawl.codec import RequestCodec
from netdisco.crawl.request import Request
from netdisco.frontiers.sqlite import SqliteFrontier
from tests.netdisco.redis_support import SiteSpider, make_request, site_spider


def opened(state: Path, spider: Spider) -> SqliteFrontier[Request]:
    return SqliteFrontier(state, spider.name, RequestCodec(spider))


async def test_a_reopened_state_queues_what_was_not_acknowledged(tmp_path: Path) -> None:
    spider = site_spider("http://127.0.0.1:1")
    first = opened(tmp_path, spider)
    await first.open()
    urls = [f"http://127.0.0.1:1/{n}" for n in range(3)]
    assert await first.add([make_request(spider, url) for url in urls]) == [True] * 3
    taken = [await first.take(), await first.take()]
    assert taken[0] is not None
    await first.done(taken[0])  # acknowledged; taken[1] is still in flight
    assert await first.counts() == (1, 1, 3)
    await first.close()
    again = opened(tmp_path, spider)
    await again.open()
    try:
        assert await again.counts() == (2, 0, 3)
        assert await again.add([make_request(spider, urls[0])]) == [False]  # seen survives
        left = {(await again.take()).url for _ in range(2)}  # type: ignore[union-attr]
        assert left == set(urls[1:])
        assert not again.finished
    finally:
        await again.close()


class Renamed(SiteSpider):
    """The same spider after its callback ``parse`` was renamed: stored requests name it."""

    def __getattribute__(self, name: str) -> object:
        if name == "parse":
            raise AttributeError(name)
        return super().__getattribute__(name)


async def test_requests_the_spider_cannot_read_stay_stored_and_block_finished(
    tmp_path: Path,
) -> None:
    spider = site_spider("http://127.0.0.1:1")
    first = opened(tmp_path, spider)
    await first.open()
    await first.add([make_request(spider, "http://127.0.0.1:1/kept")])
    await first.close()
    renamed = opened(tmp_path, Renamed(start_urls=[]))
    await renamed.open()
    assert await renamed.counts() == (0, 0, 1)
    await renamed.mark_finished()
    await renamed.close()
    assert not renamed.finished
    back = opened(tmp_path, spider)
    await back.open()
    try:
        request = await back.take()
        assert request is not None
        assert request.url == "http://127.0.0.1:1/kept"
    finally:
        await back.close()
