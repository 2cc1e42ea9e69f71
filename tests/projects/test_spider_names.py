"""Spiders by ``name``: read from a project's source at deploy (never imported), unique
in a version, and resolved from a job's request (pure)."""

from __future__ import annotations

import pytest

from netdisco.exceptions import ProjectRefused, SpiderNotAllowed
from netdisco.projects.archive import spider_names, unique_names
from netdisco.projects.store import default_names, project_spider

SOURCE = b"""
from netdisco import Spider

class Base(Spider):
    name = "base"

class Small(Spider):
    name = "small"

class Slow(Spider):
    name: str = "slow"

class Child(Base):
    pass

class Plain(Spider):
    start_urls = []
"""
REFS = ("shop.spiders:Small", "shop.spiders:Slow", "shop.spiders:Child", "shop.spiders:Plain")


def test_names_are_read_from_the_class_its_bases_or_the_class_name() -> None:
    names = spider_names({"shop/spiders.py": SOURCE}, REFS)
    assert names == {
        "shop.spiders:Small": "small",
        "shop.spiders:Slow": "slow",
        "shop.spiders:Child": "base",  # inherited, as the class would have it
        "shop.spiders:Plain": "plain",  # Spider's fallback: the class name, lower case
    }


def test_two_spiders_of_one_name_are_refused_naming_both() -> None:
    with pytest.raises(ProjectRefused) as caught:
        unique_names({"a.x:One": "same", "b.y:Two": "same", "c:Three": "other"})
    assert caught.value.status == 422
    assert "a.x:One and b.y:Two are both named 'same'" in str(caught.value)
    with pytest.raises(ProjectRefused, match="named 'a/b'"):
        unique_names({"a:B": "a/b"})


def test_a_job_names_its_spider_by_name_or_module_class_and_unknown_lists_names() -> None:
    names = {"shop.spiders:Small": "small", "shop.spiders:Slow": "slow"}
    assert project_spider("small", names) == "shop.spiders:Small"
    assert project_spider("shop.spiders:Slow", names) == "shop.spiders:Slow"
    assert project_spider("Slow", names) == "shop.spiders:Slow"  # a class name, as before
    with pytest.raises(SpiderNotAllowed) as caught:
        project_spider("fast", names)
    assert str(caught.value).endswith(
        "no spider 'fast'; its spiders: slow (shop.spiders:Slow), small (shop.spiders:Small)"
    )
    with pytest.raises(SpiderNotAllowed, match=r"no spider 'shop\.spiders:Fast'"):
        project_spider("shop.spiders:Fast", names)
    assert default_names(("a:Big",)) == {"a:Big": "big"}  # a version stored before names
