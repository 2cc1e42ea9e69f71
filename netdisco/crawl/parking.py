"""Requests set aside while their host cannot take them, so that workers serve others.

Used with the downloader's own per-host limits; with host queues in Redis the frontier
hands out only requests that may start, so nothing waits here for a slot.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from netdisco.crawl.request import Request

if TYPE_CHECKING:
    from netdisco.crawl.downloader import Downloader


class Parking:
    """Requests set aside while their host is at its limit, so that a worker serves
    another host instead of waiting: one slow host must not hold every worker.

    At most ``limit`` wait here; past that a worker waits for the host as before, which
    keeps memory bounded when the frontier holds nothing but one busy host.
    """

    def __init__(self, downloader: Downloader, limit: int) -> None:
        self.downloader = downloader
        self.limit = limit
        self._hosts: dict[str, deque[Request]] = {}
        self._count = 0

    def park(self, request: Request) -> bool:
        """Set ``request`` aside if its host is busy or its robots.txt unreachable (and
        there is room); say if it was."""
        host = urlsplit(request.url).netloc
        if self._count >= self.limit or not self.downloader.busy(host, request.url):
            return False
        self._hosts.setdefault(host, deque()).append(request)
        self._count += 1
        return True

    def ready(self) -> Request | None:
        """A parked request whose host has room now, oldest first per host."""
        if not self._count:
            return None
        for host, waiting in self._hosts.items():
            if not self.downloader.busy(host, waiting[0].url):
                request = waiting.popleft()
                if not waiting:
                    del self._hosts[host]
                self._count -= 1
                return request
        return None

    def drain(self) -> list[Request]:
        """Every parked request (to hand back to the frontier on close)."""
        requests = [r for waiting in self._hosts.values() for r in waiting]
        robots = self.downloader.robots
        if robots is not None:  # handed back while their robots.txt did not answer
            self.downloader.stats.robots_deferred += sum(
                robots.unreachable(r.url) for r in requests
            )
        self._hosts.clear()
        self._count = 0
        return requests
