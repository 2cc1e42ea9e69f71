"""Hosts served side by side (``netdisco.crawl.hosts``): a worker is handed a request
only when its host is due, and a URL robots.txt forbids costs its host no turn.

Real servers on loopback, one address each (127.0.0.2, .3, ...), each logging when
every request arrived: the assertions read the servers' own order of arrivals.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from netdisco import Crawler, Request, Response, Settings, Spider
from netdisco.crawl.hosts import ReadyHosts
from netdisco.crawl.politeness import Politeness
from netdisco.crawl.stats import Stats
from netdisco.crawl.throttle import Throttle
from netdisco.testing import serve


class Host:
    """Serves ``/index`` linking ``links``, other pages after ``latency``; ``robots``
    is its robots.txt. ``log`` holds every path asked for, in order."""

    def __init__(self, latency: float = 0.0, robots: str = "") -> None:
        self.latency, self.robots = latency, robots
        self.links: list[str] = []
        self.log: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.log.append(request.path)
        if request.path == "/robots.txt":
            return web.Response(text=self.robots)
        if request.path != "/index":
            await asyncio.sleep(self.latency)
        body = "".join(f'<a href="{link}">x</a>' for link in self.links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{path:.*}", self.handle)
        return app

    def pages(self) -> list[str]:
        return [path for path in self.log if path != "/robots.txt"]


class Follow(Spider):
    """Follows every link; records how far each host's server log was at a denial."""

    name = "ready-hosts"

    def __init__(self, start: str, hosts: list[Host]) -> None:
        super().__init__(start_urls=[start])
        self.hosts = hosts
        self.denied_at: list[int] = []  # pages the servers had been asked for, at each

    def parse(self, response: Response) -> Iterator[Any]:
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse, errback=self.denied)

    def denied(self, request: Request, exc: BaseException) -> None:
        self.denied_at.append(sum(len(h.pages()) for h in self.hosts))


async def test_small_hosts_are_served_while_the_big_one_is_busy() -> None:
    """The big host's 60 links come first in the queue, the three small sites after."""
    big, small = Host(latency=0.05), [Host(), Host(), Host()]
    async with (
        serve(big.app(), "127.0.0.2") as big_base,
        serve(small[0].app(), "127.0.0.3") as s1,
        serve(small[1].app(), "127.0.0.4") as s2,
        serve(small[2].app(), "127.0.0.5") as s3,
    ):
        big.links = [f"{big_base}/big-{n}" for n in range(60)] + [
            f"{b}/index" for b in (s1, s2, s3)
        ]
        for host, base in zip(small, (s1, s2, s3), strict=True):
            host.links = [f"{base}/page-{n}" for n in range(4)]
        settings = Settings(concurrency=4, per_host_concurrency=1, obey_robots=False)
        crawler = Crawler(Follow(f"{big_base}/index", [big, *small]), settings)
        log: list[str] = []  # every host's arrivals, in one order
        for host, name in ((big, "big"), *zip(small, ("s1", "s2", "s3"), strict=True)):
            host.log = _Tee(log, name)
        stats = await crawler.run()
    assert stats.succeeded == 1 + 60 + 3 * 5
    assert sorted(small[0].pages()) == ["/index", *(f"/page-{n}" for n in range(4))]
    big_starts = [n for n, name in enumerate(log) if name == "big"]
    last_small = max(n for n, name in enumerate(log) if name != "big")
    # every small page was asked for before the big host's last quarter (its 46th page
    # of 61): the big host alone holds no worker that the small ones could use
    assert last_small < big_starts[45]
    assert crawler.downloader.drain() == []


class _Tee(list[str]):
    """A server's log that also writes the server's name into a shared log."""

    def __init__(self, shared: list[str], name: str) -> None:
        super().__init__()
        self.shared, self.name = shared, name

    def append(self, path: str) -> None:
        super().append(path)
        if path != "/robots.txt":
            self.shared.append(self.name)


async def test_urls_robots_forbids_cost_no_turn() -> None:
    """With a 0.2 s delay, 30 denied links behind 4 allowed ones are dropped before any
    of the allowed ones is sent: none waits for the host's turn, none takes one."""
    host = Host(robots="User-agent: *\nDisallow: /private/\n")
    async with serve(host.app(), "127.0.0.2") as base:
        host.links = [f"{base}/open-{n}" for n in range(4)]
        host.links += [f"{base}/private/{n}" for n in range(30)]
        settings = Settings(concurrency=4, download_delay=0.2)
        spider = Follow(f"{base}/index", [host])
        crawler = Crawler(spider, settings)
        stats = await crawler.run()
    assert stats.succeeded == 5
    assert stats.robots_blocked == 30
    assert sorted(host.pages()) == ["/index", *(f"/open-{n}" for n in range(4))]
    assert spider.denied_at == [1] * 30  # only the index had been fetched at each denial
    assert isinstance(crawler.politeness, Politeness)
    assert crawler.politeness.hosts.turns == len(host.pages())  # one turn a page sent


async def test_hosts_behind_a_long_queue_of_one_host_start_at_once() -> None:
    """400 links of one host ahead of five small sites in the queue: with a queue per
    host (fair rounds), every small site starts before the big host's 20th page, not
    after its queue ahead of them drained (the hosts must not take turns)."""
    big, small = IndexOnly(latency=0.01), [IndexOnly() for _ in range(5)]
    async with contextlib.AsyncExitStack() as stack:
        big_base = await stack.enter_async_context(serve(big.app(), "127.0.0.2"))
        bases = [
            await stack.enter_async_context(serve(h.app(), f"127.0.0.{n}"))
            for n, h in enumerate(small, 3)
        ]
        big.links = [f"{big_base}/big-{n}" for n in range(400)] + [f"{b}/index" for b in bases]
        for host, base in zip(small, bases, strict=True):
            host.links = [f"{base}/page-{n}" for n in range(20)]
        settings = Settings(concurrency=16, per_host_concurrency=2, obey_robots=False)
        crawler = Crawler(Follow(f"{big_base}/index", [big, *small]), settings)
        log: list[str] = []
        for n, host in enumerate([big, *small]):
            host.log = _Tee(log, "big" if n == 0 else f"s{n}")
        stats = await asyncio.wait_for(crawler.run(), 60)
    assert stats.succeeded == 1 + 400 + 5 * 21
    big_starts = [n for n, name in enumerate(log) if name == "big"]
    for name in ("s1", "s2", "s3", "s4", "s5"):
        assert log.index(name) < big_starts[20], (name, log.index(name))
    # and every small site is done while the big one still has most of its pages to go
    last_small = max(n for n, name in enumerate(log) if name != "big")
    assert last_small < big_starts[200]


class IndexOnly(Host):
    """Links from ``/index`` only: its other pages link nothing."""

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/index":
            return await super().handle(request)
        self.log.append(request.path)
        await asyncio.sleep(self.latency)
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")


def test_the_idle_share_counts_free_undelayed_slot_time_while_work_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two slots, a third request aside: a slot freed at 1 s and taken again only at 3 s
    leaves 2 of the 6 slot-seconds (0 to 3 s, two slots) idle: a share of 1/3."""
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    ready = ReadyHosts(
        Throttle(Settings(per_host_concurrency=2)), size=10, limit=10,
        blocked=lambda url: False, denied=lambda url: False,
    )  # fmt: skip
    first, second, third = (Request(f"http://h.test/{n}") for n in range(3))
    assert [ready.place(r) for r in (first, second, third)] == ["go", "go", "parked"]
    assert ready.idle_share() is None  # nothing had waited yet
    clock[0] = 1.0
    ready.release(first)  # a slot is free from here, and a request waits
    clock[0] = 3.0
    assert ready.ready() is third
    assert ready.idle_share() == pytest.approx(2 / 6)


async def test_a_crawl_of_one_busy_host_keeps_its_slots_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One host, two slots, 60 pages queued at once: whenever a slot frees, the next
    request starts. No worker ever goes to sleep while a request set aside could start
    now (the idle share counts slot-time free while work waited: it is near 1 when slots
    wait on something other than politeness), and the share counted is exported.

    Checked by cause, not by the share's size: the share is measured on the crawl's own
    loop, and a busy machine stretches each page's hand-over from one slot to the next."""
    host = IndexOnly(latency=0.02)
    async with serve(host.app(), "127.0.0.2") as base:
        host.links = [f"{base}/p-{n}" for n in range(60)]
        settings = Settings(concurrency=8, per_host_concurrency=2, obey_robots=False)
        crawler = Crawler(Follow(f"{base}/index", [host]), settings)
        assert isinstance(crawler.politeness, Politeness)
        hosts = crawler.politeness.hosts
        idle_while_due: list[dict[str, int]] = []  # what waited aside, at each such sleep
        wait_for_work = crawler.ctx.wait_for_work

        async def sleeping(timeout: float) -> None:
            if timeout > 0 and _due_now(hosts):
                idle_while_due.append(hosts.parked_by_host())
            await wait_for_work(timeout)

        monkeypatch.setattr(crawler.ctx, "wait_for_work", sleeping)
        stats = await asyncio.wait_for(crawler.run(), 60)
    assert stats.succeeded == 61
    assert hosts.turns == 61
    assert idle_while_due == []  # a free slot never waited for a worker's poll
    share = crawler.politeness.idle_share()
    assert share is not None  # requests did wait aside, and were counted
    assert 0 <= share <= 1
    assert stats.as_dict()["idle_share"] == round(share, 4)


def _due_now(hosts: ReadyHosts) -> bool:
    """Whether a host with requests set aside may start one now (a free slot, no delay
    left to run)."""
    now = time.monotonic()
    slots = [hosts.peek(host) for host in hosts.parked_by_host()]
    return any(s is not None and (due := s.due()) is not None and due <= now for s in slots)


async def test_a_host_handed_to_another_owner_keeps_its_pace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host started at 10 s with a delay of 1 s, handed on at 10.3 s: the new owner,
    seeded with the rest it must still take, starts nothing of it before 11 s; a 429's
    rest goes with the host too, and a host with nothing left to wait is not handed on."""
    clock = [10.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])

    def owner() -> ReadyHosts:
        return ReadyHosts(
            Throttle(Settings(download_delay=1.0)), size=10, limit=10,
            blocked=lambda url: False, denied=lambda url: False,
        )  # fmt: skip

    losing, gaining = owner(), owner()
    start = await losing.slot("h.test").wait_turn()
    assert start is not None
    start()  # it went out at 10 s
    clock[0] = 10.3
    paces = losing.paces(["h.test", "other.test"])
    assert paces == {"h.test": pytest.approx((0.3, 1.0))}
    age, delay = paces["h.test"]
    gaining.seed("h.test", delay - age)  # what the acquisition answers
    request = Request("http://h.test/1")
    assert gaining.place(request) == "parked"  # not due before 11 s
    clock[0] = 10.99
    assert gaining.ready() is None
    clock[0] = 11.0
    assert gaining.ready() is request
    losing.slot("h.test").rest(5.0)  # a 429 at 11 s: the host rests until 16 s
    assert losing.paces(["h.test"]) == {"h.test": pytest.approx((1.0, 6.0))}
    clock[0] = 16.0
    assert losing.paces(["h.test"]) == {}


async def test_at_a_delay_a_start_wakes_one_idle_worker_not_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sixteen workers, one host with a 50 ms delay, 30 pages queued at once: most
    workers are idle the whole crawl. Each start used to wake every idle worker, and
    each then slept until the same due time and woke again: about 30 wake-ups a page.
    Now a start, an end and the timer of the next due host each wake one (about 3 a
    page, with the seeds' and the end's): counted where it happens, the workers
    ``notify`` wakes, not by the clock."""
    woken = 0

    def watch(crawler: Crawler) -> None:
        notify = crawler.ctx.notify

        def counted(count: int | None = None) -> None:
            nonlocal woken
            asleep = len(crawler.ctx._waiters)
            notify(count)
            woken += asleep - len(crawler.ctx._waiters)

        monkeypatch.setattr(crawler.ctx, "notify", counted)

    settings = Settings(
        concurrency=16, per_host_concurrency=1, download_delay=0.05, obey_robots=False
    )
    stats = await _crawl_one_host(30, 0.0, settings, watch)
    assert stats.succeeded == 31
    assert woken <= 6 * stats.succeeded, woken  # every idle worker at each start: 15


async def test_at_a_delay_a_host_aside_keeps_one_entry_in_the_ready_heap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One host, two slots, a 50 ms delay, 40 pages queued at once. Every start and
    every end used to push another heap entry for the host, and each start popped and
    pushed all of them again: 200 pages made 80,000 pops, and a host of 4,000 pages
    at a delay spent most of its engine's CPU there. Now the host has one live entry,
    and stale ones are dropped as they surface: the heap, read at every ``ready``,
    never holds more than a few (stale ones included)."""
    sizes: list[int] = []

    def watch(crawler: Crawler) -> None:
        assert isinstance(crawler.politeness, Politeness)
        hosts = crawler.politeness.hosts
        ready = hosts.ready

        def reading() -> Request | None:
            sizes.append(len(hosts._heap))
            return ready()

        monkeypatch.setattr(hosts, "ready", reading)

    settings = Settings(
        concurrency=8, per_host_concurrency=2, download_delay=0.05, obey_robots=False
    )
    stats = await _crawl_one_host(40, 0.02, settings, watch)
    assert stats.succeeded == 41
    assert len(sizes) > 41  # read while the pages waited aside
    assert max(sizes) <= 4, max(sizes)  # it grew by two a page: 79 by the end


async def _crawl_one_host(
    pages: int, latency: float, settings: Settings, watch: Callable[[Crawler], None]
) -> Stats:
    """A crawl of ``pages`` pages linked from one host's index, each answered after
    ``latency`` s; ``watch(crawler)`` runs before it starts (to count what it does)."""
    host = IndexOnly(latency=latency)
    async with serve(host.app(), "127.0.0.2") as base:
        host.links = [f"{base}/p-{n}" for n in range(pages)]
        crawler = Crawler(Follow(f"{base}/index", [host]), settings)
        watch(crawler)
        return await asyncio.wait_for(crawler.run(), 60)


def test_room_for_one_more_aside_does_not_reopen_the_search_past_full_hosts() -> None:
    """Two hosts, each with its slot busy and its queue aside full: every take goes back
    to the frontier, and a run of those halves how many the next run may send. A start
    frees room for one more aside; the take that fills it is no reason to search past
    full hosts at full width again. It used to be: on a crawl of 1,000 hosts, idle
    workers took and gave back 2.3 million requests for 100,000 pages (26,000 now)."""
    ready = ReadyHosts(
        Throttle(Settings(per_host_concurrency=1)), size=10, limit=100,
        blocked=lambda url: False, denied=lambda url: False,
    )  # fmt: skip
    made = itertools.count()

    def request(host: str) -> Request:
        return Request(f"http://{host}.test/{next(made)}")

    first = request("a")
    assert [ready.place(r) for r in (first, request("b"))] == ["go", "go"]
    assert {ready.place(request(h)) for h in "ab" * 4} == {"parked"}  # 4 x 1 slot each

    def backs() -> int:
        count = 0
        while ready.taking():
            assert ready.place(request("ab"[count % 2])) == "back"
            count += 1
        return count

    assert backs() == 100  # the first run goes the whole width
    ready.release(first)
    assert ready.ready() is not None  # a's next starts: room for one more of a aside
    assert ready.place(request("b")) == "back"
    assert ready.place(request("a")) == "parked"
    assert backs() <= 49  # the halved width, less the one sent back: not 100 again
