"""Politeness checked where it is decided, and timeouts raced by one host only.

* ``of_host`` / ``assert_paced``: a host's delay read from its slot's own record of
  each turn, start and rest (``ReadyHosts.record_paces``), never from times a loaded
  loop stamps at a server on that same loop: a late loop only makes a turn later.
* ``timeout_only_for``: a download handler that gives the crawl's short ``timeout``
  only to the requests that must time out (a server that never answers), and a
  generous one to every page that answers, so that no answering page has to beat a
  fraction of a second on a busy machine.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable

import pytest

from netdisco import Request, Response, Settings
from netdisco.crawl.downloader import _session
from netdisco.crawl.hosts import Pace
from netdisco.crawl.transport import AiohttpHandler

#: the timeout of every request that is not meant to time out (s)
PATIENT = 60.0


def of_host(record: list[Pace], base: str) -> list[Pace]:
    """The decisions about ``base``'s host (``http://host:port``), in order."""
    host = base.removeprefix("http://")
    return [pace for pace in record if pace.host == host]


def assert_paced(paces: list[Pace], delay: float | None = None) -> None:
    """No turn of the host came before the due time the start before it set: the delay
    decided when that one went out, obeyed exactly (a loaded loop only makes a turn
    later); and each start counted ``delay``, if given."""
    starts = [p for p in paces if p.kind == "start"]
    assert starts
    if delay is not None:
        assert all(p.due - p.at == pytest.approx(delay, abs=1e-9) for p in starts), starts
    due = -math.inf
    for pace in paces:
        if pace.kind == "turn":
            assert pace.at >= due, f"a turn {due - pace.at:.6f} s before the host was due"
        elif pace.kind == "start":
            due = pace.due


class _Routed:
    """``short`` requests through ``quick``, the rest through ``patient``."""

    def __init__(
        self, quick: AiohttpHandler, patient: AiohttpHandler, short: Callable[[Request], bool]
    ) -> None:
        self.quick, self.patient, self.short = quick, patient, short

    async def fetch(self, request: Request) -> Response:
        return await (self.quick if self.short(request) else self.patient).fetch(request)


@contextlib.asynccontextmanager
async def timeout_only_for(
    settings: Settings, short: Callable[[Request], bool]
) -> AsyncIterator[_Routed]:
    """A handler for ``Crawler(download_handler=...)``: the requests ``short`` picks go
    through a session the crawl's own code builds from ``settings`` (its ``timeout``,
    aiohttp's timeout path), every other one through the same but with ``PATIENT``."""
    quick, patient = _session(settings), _session(settings.replace(timeout=PATIENT))
    try:
        yield _Routed(AiohttpHandler(quick, settings), AiohttpHandler(patient, settings), short)
    finally:
        await quick.close()
        await patient.close()
