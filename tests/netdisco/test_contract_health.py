"""The health part of the node contract: stalled, loop lag, node facts, spider figures.

Readers parse whatever a node holds without raising, keep only known facts of the
right type and size, and a payload survives the round trip through its JSON.
"""

from __future__ import annotations

import json

from netdisco.cluster.contract import (
    MAX_DISKS,
    EnginePayload,
    SpiderSummary,
    parse_facts,
    parse_payload,
)


def test_health_fields_round_trip() -> None:
    payload = EnginePayload(
        id="e1",
        stalled=True,
        loop_lag=7.5,
        facts={"cpu_percent": 12.5, "rss": 1000, "disk_free": {"state": 5}, "python": "3.12.1"},
        spiders=(SpiderSummary(name="s", state="running", pages=3, items=2, failed=1, crawl="ab"),),
    )
    back = parse_payload(payload.to_json())
    assert back.stalled is True
    assert back.loop_lag == 7.5
    assert back.facts == payload.facts
    assert back.spiders == payload.spiders
    assert back.extra == {}


def test_older_writers_read_as_unknown() -> None:
    back = parse_payload(b'{"id": "e1", "spiders": [{"name": "s", "state": "running"}]}')
    assert (back.stalled, back.loop_lag, back.facts) == (None, None, {})
    spider = back.spiders[0]
    assert (spider.pages, spider.items, spider.failed, spider.crawl) == (None, None, None, None)


def test_wrong_types_and_sizes_are_dropped() -> None:
    raw = {
        "stalled": "yes",
        "loop_lag": -1,
        "facts": {
            "cpu_percent": "high",
            "load1": float("inf"),
            "rss": True,
            "open_fds": 12,
            "python": "x" * 1000,
            "netdisco": 3,
            "evil": "__import__('os')",
            "disk_free": {"state": -5, "feeds": 10, "x" * 100: 1},
        },
        "spiders": [{"name": "s", "state": "r", "pages": -1, "items": 2**70, "crawl": ["a"]}],
    }
    back = parse_payload(json.dumps(raw).encode())
    assert (back.stalled, back.loop_lag) == (None, None)
    assert back.facts == {"open_fds": 12, "disk_free": {"feeds": 10}}
    spider = back.spiders[0]
    assert (spider.pages, spider.items, spider.crawl) == (None, None, None)


def test_disk_free_is_bounded() -> None:
    facts = parse_facts({"disk_free": {f"d{i}": i for i in range(100)}})
    assert len(facts["disk_free"]) == MAX_DISKS
    assert parse_facts("not a dict") == {}
