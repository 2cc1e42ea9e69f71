"""The parent's end of the workers' channel (pure logic) and the ``processes`` setting."""

from __future__ import annotations

import os
from typing import Any

import pytest

from netdisco.crawl import settings as settings_module
from netdisco.exceptions import ConfigError
from netdisco.procs.channel import Sink, Worker


class Feed:
    """A feed that keeps what it is given."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.flushes = 0

    def process(self, item: Any) -> None:
        self.items.append(item)

    async def flush(self) -> None:
        self.flushes += 1


class Writer:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)


async def send(sink: Sink, worker: Worker, *messages: dict[str, Any]) -> Writer:
    writer = Writer()
    for message in messages:
        await sink.handle(worker, message, writer)  # type: ignore[arg-type]
    return writer


async def test_a_page_is_written_whole_and_once_across_a_dead_worker() -> None:
    feed = Feed()
    sink = Sink([feed])  # type: ignore[list-item]
    dead, alive = Worker(), Worker()
    await send(sink, dead, {"i": 1, "p": "a"}, {"i": 2, "p": "a"}, {"e": "a"}, {"i": 3, "p": "b"})
    assert feed.items == [1, 2]  # b is not finished: not written
    sink.lost(dead)
    # the survivor fetches both again: a is a duplicate, b is written whole, once
    await send(sink, alive, {"i": 1, "p": "a"}, {"i": 2, "p": "a"}, {"e": "a"})
    await send(sink, alive, {"i": 3, "p": "b"}, {"i": 4, "p": "b"}, {"e": "b"})
    assert feed.items == [1, 2, 3, 4]
    assert sink.duplicates == 1


async def test_a_flush_is_answered_after_the_feeds_flushed() -> None:
    feed = Feed()
    writer = await send(Sink([feed]), Worker(), {"i": "x", "p": None}, {"f": 7})  # type: ignore[list-item]
    assert feed.items == ["x"]
    assert feed.flushes == 1
    assert writer.lines == [b'{"f": 7}\n']


@pytest.mark.parametrize(
    "message", [[1], {"x": 1}, {"f": "1"}, {"i": 1, "p": "a", "q": 2}, {"s": []}]
)
async def test_a_malformed_message_is_refused(message: Any) -> None:
    with pytest.raises(ValueError, match="message"):
        await send(Sink([]), Worker(), message)


def test_processes_auto_is_the_cores_and_bounded() -> None:
    assert settings_module.from_mapping({"processes": "auto"}).processes == (os.cpu_count() or 1)
    assert settings_module.from_mapping({"processes": "3"}).processes == 3
    for bad in ("0", "257", "many"):
        with pytest.raises(ConfigError, match="processes"):
            settings_module.from_mapping({"processes": bad})


def test_a_crawler_refuses_processes_an_engine_spider_cannot_have() -> None:
    from netdisco import Crawler
    from tests.netdisco.redis_support import SiteSpider

    with pytest.raises(ConfigError, match="netdisco crawl -j N"):
        Crawler(SiteSpider(), {"processes": 2})
