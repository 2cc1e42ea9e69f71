"""What the monitor keeps of an engine's failed requests, and what a retry may ask."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from aiohttp import web

from monitor.failed import MAX_URL, readers, summary
from monitor.http import retry_selection
from netdisco.cluster.membership import Member


def member(name: str, *spiders: Mapping[str, object]) -> Member:
    return Member(name=name, czxid=1, session=1, since=0.0, data={"spiders": list(spiders)})


def test_a_shared_crawl_is_read_once_private_ones_each() -> None:
    shared = {"name": "shop", "state": "running", "crawl": "redis-shop"}
    private = {"name": "shop", "state": "running"}
    members = [member("a", shared), member("b", shared), member("c", private),
               member("d", private), member("e", {"name": "news", "state": "running"})]  # fmt: skip
    assert [m.name for m in readers(members, "shop")] == ["a", "c", "d"]


def test_an_answer_is_checked_and_cut() -> None:
    body = {"total": 3, "dropped": True, "by_reason": {"http_404": 2, "x\n": 1, "t": -1},
            "failed": [{"url": "http://h/" + "a" * 5000, "status": 404, "attempts": "1",
                        "reason": "http_404", "last_at": 1.5}, {"url": 7}, "junk"]}  # fmt: skip
    out = summary("e", body)
    assert (out["total"], out["dropped"], out["by_reason"]) == (3, None, {"http_404": 2})
    [entry] = out["failed"]
    assert len(entry["url"]) == MAX_URL
    assert (entry["status"], entry["attempts"], entry["last_at"]) == (404, None, 1.5)
    assert summary("e", ["not", "an", "object"])["error"] == "not a JSON object"


@pytest.mark.parametrize(
    ("body", "selection"),
    [
        (None, {}),
        ({}, {}),
        ({"reason": "http_404"}, {"reason": "http_404"}),
        ({"ids": ["ab", "cd"]}, {"ids": ["ab", "cd"]}),
    ],
)
def test_a_retry_selects_all_a_reason_or_ids(body: object, selection: dict[str, object]) -> None:
    assert retry_selection(body) == selection


@pytest.mark.parametrize(
    "body",
    [
        {"reason": ""},
        {"reason": 5},
        {"reason": "x" * 201},
        {"ids": []},
        {"ids": [1]},
        {"ids": ["x"] * 1001},
        {"ids": ["a"], "reason": "b"},
        {"all": True},
        ["ids"],
        "x",
    ],
)
def test_anything_else_is_refused(body: object) -> None:
    with pytest.raises(web.HTTPBadRequest):
        retry_selection(body)
