"""Issue 16, item 3: incremental re-crawls against a real server that honours validators.

Each run is a real crawl of a loopback aiohttp site that answers ``If-None-Match`` and
``If-Modified-Since`` with 304 and counts at the server every request and every
validator it got; the page store is the real SQLite ``state_dir`` (or Redis).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from netdisco import CallablePipeline, Crawler, Spider
from netdisco.crawl.recrawl import PageRecord
from netdisco.crawl.settings import from_mapping
from netdisco.exceptions import ConfigError

from .recrawl_support import ConditionalSite, Links, NotedLinks, page

QUIET = {"progress_interval": 0, "obey_robots": False, "retries": 0}


@pytest.fixture
async def site() -> AsyncIterator[ConditionalSite]:
    """``/`` -> ``/a``, ``/b``; ``/a`` -> ``/c``: four pages, each linked from one other."""
    server = ConditionalSite(
        {"/": page("/a", "/b"), "/a": page("/c"), "/b": page(), "/c": page(text="c")}
    )
    await server.start()
    yield server
    await server.stop()


async def crawl(
    spider: Spider, state: Path, **settings: Any
) -> tuple[Crawler, list[dict[str, Any]]]:
    """One run of ``spider`` to its end on ``state``; the crawler and the items it made."""
    items: list[dict[str, Any]] = []
    crawler = Crawler(
        spider,
        from_mapping({**QUIET, "state_dir": str(state), **settings}),
        pipelines=[CallablePipeline(items.append)],
    )
    await crawler.run()
    assert crawler.state == "finished", crawler.stats.last_error
    return crawler, items


def path_of(url: str, base: str) -> str:
    return url.removeprefix(base) or "/"


async def test_second_run_revalidates_and_reaches_pages_behind_unchanged_ones(
    site: ConditionalSite, tmp_path: Path
) -> None:
    spider = Links(start_urls=[f"{site.base}/"])
    _first, items = await crawl(spider, tmp_path, recrawl="conditional")
    assert sorted(path_of(i["url"], site.base) for i in items) == ["/", "/a", "/b", "/c"]
    assert not site.conditional
    assert sum(site.full.values()) == 4
    site.set("/c", page("/new", text="c, changed"))  # behind two unchanged pages
    site.set("/new", page(text="new"))
    site.reset_counts()
    second, items = await crawl(
        Links(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional"
    )
    # every stored page went out with its validators; the unchanged ones got 304
    assert dict(site.conditional) == {"/": 1, "/a": 1, "/b": 1, "/c": 1}
    assert dict(site.not_modified) == {"/": 1, "/a": 1, "/b": 1}
    assert dict(site.full) == {"/c": 1, "/new": 1}  # reached only through 304 pages
    assert all(inm and ims for _, inm, ims in site.headers if _ != "/new")
    assert sorted(path_of(i["url"], site.base) for i in items) == ["/c", "/new"]
    assert (second.stats.not_modified, second.stats.succeeded) == (3, 2)
    assert second.status()["not_modified"] == 3
    site.reset_counts()
    third, items = await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional")
    assert sum(site.not_modified.values()) == 5
    assert not site.full
    assert not items
    assert third.stats.not_modified == 5


async def test_on_not_modified_makes_the_items_of_unchanged_pages(
    site: ConditionalSite, tmp_path: Path
) -> None:
    await crawl(NotedLinks(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional")
    site.set("/b", page(text="b, changed"))
    _, items = await crawl(
        NotedLinks(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional"
    )
    unchanged = sorted(path_of(i["unchanged"], site.base) for i in items if "unchanged" in i)
    assert unchanged == ["/", "/a", "/c"]
    assert {i["status"] for i in items if "unchanged" in i} == {304}
    assert [path_of(i["url"], site.base) for i in items if "url" in i] == ["/b"]


async def test_age_skips_pages_fetched_recently_and_follows_their_links(
    site: ConditionalSite, tmp_path: Path
) -> None:
    await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path, age="1d")
    site.reset_counts()
    second, items = await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path, age="1d")
    assert not site.requests  # not one request reached the server
    assert second.stats.age_skipped == 4  # every page reached, through stored links
    assert (second.stats.succeeded, items) == (0, [])


async def test_a_304_without_a_stored_page_is_a_counted_failure(
    site: ConditionalSite, tmp_path: Path
) -> None:
    spider = Links(start_urls=[f"{site.base}/liar/x", f"{site.base}/"])
    crawler, items = await crawl(spider, tmp_path, recrawl="conditional")
    assert crawler.stats.failed == 1
    assert crawler.stats.not_modified == 0
    assert "304 Not Modified to a request without conditions" in str(crawler.stats.last_error)
    assert len(items) == 4  # the rest of the crawl went on


async def test_an_unreadable_record_is_fetched_unconditionally_and_stored_anew(
    site: ConditionalSite, tmp_path: Path
) -> None:
    await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional")
    with sqlite3.connect(tmp_path / "frontier.sqlite") as db:
        fps = [row[0] for row in db.execute("SELECT fp FROM pages")]
        assert len(fps) == 4
        evil = PageRecord('"x"\r\nX-Evil: 1', "yesterday", 1.0, ()).encode()
        db.execute("UPDATE pages SET record = ? WHERE fp = ?", (b"\x00garbage", fps[0]))
        db.execute("UPDATE pages SET record = ? WHERE fp = ?", (evil, fps[1]))
    site.reset_counts()
    second, _items = await crawl(
        Links(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional"
    )
    assert second.stats.failed == 0
    assert sum(site.requests.values()) == 4
    assert not any("Evil" in str(h) or "yesterday" in str(h) for h in site.headers)
    assert sum(site.conditional.values()) == 2  # the two good records
    assert sum(site.full.values()) == 2  # the unreadable ones: fetched and stored again
    await all_revalidated(site, tmp_path)


async def all_revalidated(site: ConditionalSite, state: Path) -> None:
    """The next conditional run asks for all four pages with validators: every one a 304."""
    site.reset_counts()
    await crawl(Links(start_urls=[f"{site.base}/"]), state, recrawl="conditional")
    assert sum(site.not_modified.values()) == 4


async def test_a_state_without_the_pages_table_is_read_and_gains_it(
    site: ConditionalSite, tmp_path: Path
) -> None:
    """A state_dir written before re-crawls (no ``pages`` table) is readable as it is."""
    await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path)
    with sqlite3.connect(tmp_path / "frontier.sqlite") as db:
        db.execute("DROP TABLE pages")
    site.reset_counts()
    await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path, recrawl="conditional")
    assert sum(site.full.values()) == 4  # a new run (nothing stored yet)
    await all_revalidated(site, tmp_path)


async def test_without_recrawl_a_finished_state_stays_finished(
    site: ConditionalSite, tmp_path: Path
) -> None:
    await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path)
    site.reset_counts()
    await crawl(Links(start_urls=[f"{site.base}/"]), tmp_path)
    assert not site.requests


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ({"recrawl": "sometimes"}, "recrawl", "expected always or conditional"),
        ({"recrawl": 1}, "recrawl", "expected str"),
        ({"age": "0"}, "age", "must be a positive duration"),
        ({"age": 0}, "age", "must be a positive duration"),
        ({"age": "-1d"}, "age", "expected a duration like"),
        ({"age": -5}, "age", "must be a positive duration"),
        ({"age": "soon"}, "age", "expected a duration like"),
        ({"age": True}, "age", "expected a duration like"),
    ],
)
def test_bad_values_are_refused_naming_the_key(
    table: dict[str, Any], key: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        from_mapping({"state_dir": "x", **table})
    assert caught.value.key == key
    assert message in str(caught.value)


def test_durations_and_the_memory_frontier() -> None:
    assert from_mapping({"state_dir": "x", "age": "1d"}).age == 86400.0
    assert from_mapping({"frontier": "redis://h:1/0", "age": "90m"}).age == 5400.0
    assert from_mapping({"state_dir": "x", "age": 2.5}).age == 2.5
    for table in ({"recrawl": "conditional"}, {"age": "1h"}):
        settings = from_mapping(table)  # may come before -s state_dir=...
        with pytest.raises(ConfigError, match="needs a state_dir or a Redis frontier"):
            Crawler(Links(), settings)
