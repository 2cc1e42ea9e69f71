"""``download_delay`` holds where it is observed: at the server, under a stalled loop.

The server stamps each request with the kernel's receive time (``hosts_support.served``),
so the crawler's stalls (a callback that blocks the loop for 100 ms), though they hold
up the server too, do not shift the arrival times it records. With two requests in
flight per host and a 50 ms delay, no two requests may arrive closer than the delay:
the crawler counts it from the moment a request's headers were written.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

from netdisco import Crawler, Response, Settings
from tests.netdisco.hosts_support import HostsSpider, LoggingHost, served

DELAY = 0.05
PAGES = 30


class Stalling(HostsSpider):
    """Follows every link; every third page blocks the loop for 100 ms (a big parse)."""

    name = "stalling"

    def parse(self, response: Response) -> Iterator[Any]:
        if int(response.url.rsplit("/p", 1)[1].removesuffix(".html")) % 3 == 0:
            time.sleep(0.1)  # the stall is the point
        yield from super().parse(response)


async def test_no_two_starts_closer_than_the_delay_under_a_stalled_loop() -> None:
    site = LoggingHost(latency=0.02, pages=PAGES)
    settings = Settings(
        concurrency=4, per_host_concurrency=2, download_delay=DELAY, obey_robots=False
    )
    async with served(site) as base:
        stats = await Crawler(Stalling(start_urls=[f"{base}/p0.html"]), settings).run()
    assert stats.succeeded == PAGES
    times = sorted(visit.start for visit in site.visits)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    close = [round(gap * 1000, 1) for gap in gaps if gap < DELAY]
    assert close == [], f"{len(close)} pairs of starts closer than {DELAY * 1000:.0f} ms"
