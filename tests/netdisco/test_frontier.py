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
