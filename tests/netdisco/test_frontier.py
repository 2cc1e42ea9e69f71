"""The in-memory frontier: dedup by fingerprint, priority order, leases."""

from __future__ import annotations

from netdisco import Request
from netdisco.crawl.scheduler import fingerprint
from netdisco.frontiers import Frontier, MemoryFrontier


def _request(path: str, priority: int = 0, **kwargs: object) -> Request:
    request = Request(f"http://a.test{path}", priority=priority, **kwargs)  # type: ignore[arg-type]
    request.fingerprint = fingerprint(request)
    return request


async def _drain(frontier: Frontier[Request]) -> list[str]:
    urls = []
    while (request := await frontier.take()) is not None:
        urls.append(request.url.removeprefix("http://a.test"))
        await frontier.done(request)
    return urls


async def test_add_says_which_requests_are_new() -> None:
    frontier = MemoryFrontier[Request]()
    first = await frontier.add([_request("/1"), _request("/2"), _request("/1")])
    again = await frontier.add([_request("/2"), _request("/2", dont_filter=True), _request("/3")])
    assert (first, again) == ([True, True, False], [False, True, True])
    assert await frontier.counts() == (4, 0, 3)


async def test_higher_priority_first_then_insertion_order() -> None:
    frontier = MemoryFrontier[Request]()
    await frontier.add(
        [_request("/low", -1), _request("/a", 2), _request("/mid"), _request("/b", 2)]
    )
    await frontier.add([_request("/top", 9)])
    assert await _drain(frontier) == ["/top", "/a", "/b", "/mid", "/low"]
    assert await frontier.take() is None


async def test_leases_and_requeue() -> None:
    frontier = MemoryFrontier[Request]()
    await frontier.add([_request("/1"), _request("/2", 1)])
    taken = await frontier.take()
    assert taken is not None
    assert taken.url.endswith("/2")
    assert await frontier.counts() == (1, 1, 2)
    await frontier.done(taken, requeue=True)
    assert await frontier.counts() == (2, 0, 2)
    assert await _drain(frontier) == ["/2", "/1"]
    assert await frontier.counts() == (0, 0, 2)


def _at(url: str, priority: int = 0) -> Request:
    request = Request(url, priority=priority)
    request.fingerprint = fingerprint(request)
    return request


async def _hosts(frontier: Frontier[Request], count: int) -> list[str]:
    out = []
    for _ in range(count):
        request = await frontier.take()
        assert request is not None
        out.append(request.host_key.removesuffix(".test"))
        await frontier.done(request)
    return out


async def test_hosts_take_rounds_and_a_newcomer_starts_at_the_current_round() -> None:
    """A queue per host: one request of each host with work in turn, within a priority."""
    frontier = MemoryFrontier[Request]()
    await frontier.add([_at(f"http://big.test/{n}") for n in range(6)])
    await frontier.add([_at(f"http://b.test/{n}") for n in range(2)])
    assert await _hosts(frontier, 4) == ["big", "b", "big", "b"]
    await frontier.add([_at("http://new.test/0"), _at("http://new.test/1")])  # mid-crawl
    await frontier.add([_at("http://top.test/", priority=5)])
    assert await _hosts(frontier, 5) == ["top", "new", "big", "new", "big"]
    assert await _drain(frontier) == [
        "http://big.test/4",
        "http://big.test/5",
    ]  # big's last ones, still in order


async def test_rounds_survive_the_spill_to_disk() -> None:
    from netdisco.crawl.codec import RequestCodec
    from tests.netdisco.redis_support import SiteSpider

    frontier = MemoryFrontier[Request](RequestCodec(SiteSpider()), limit=4)
    await frontier.add([_at(f"http://big.test/{n}") for n in range(10)])
    await frontier.add([_at(f"http://b.test/{n}") for n in range(3)])
    assert await _hosts(frontier, 8) == ["big", "b", "big", "b", "big", "b", "big", "big"]
    await frontier.close()
