"""``netdisco new`` and ``netdisco parse`` as subprocesses: a generated spider passes ruff
and mypy --strict and crawls a loopback site; ``parse`` shows one page's items and links."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.netdisco.sites import ROOT, Site
from tests.netdisco.test_cli import CATALOGUE, _env, run_cli, site

__all__ = ["site"]  # the fixture, imported for this module's tests
BIN = Path(sys.executable).parent


async def _tool(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, env=env or _env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode()


@pytest.mark.parametrize("template", ["basic", "crawl"])
async def test_new_writes_a_spider_that_passes_ruff_and_mypy_and_crawls(
    site: Site, tmp_path: Path, template: str
) -> None:
    url = site.url("/shop/")
    args = ("new", "shop_items", url, "--template", template, "--dir", str(tmp_path))
    code, out, err = await run_cli(*args)
    assert code == 0, err
    path = tmp_path / "shop_items.py"
    assert f"netdisco crawl {path}:ShopItems" in out
    config = str(ROOT / "pyproject.toml")  # the project's own rules, the strictest at hand
    assert await _tool(str(BIN / "ruff"), "check", "--config", config, str(path), cwd=tmp_path) == (
        0, "All checks passed!\n",
    )  # fmt: skip
    code, text = await _tool(str(BIN / "ruff"), "format", "--check", str(path), cwd=tmp_path)
    assert code == 0, text
    # outside the checkout, as a user runs it: mypy finds the venv's editable install
    # (netdisco is typed: py.typed), with no MYPYPATH and no mypy configuration
    assert not tmp_path.is_relative_to(ROOT)
    code, text = await _tool(str(BIN / "mypy"), "--strict", path.name, cwd=tmp_path)
    assert code == 0, text
    feed = tmp_path / "items.jsonl"
    code, _, err = await run_cli("crawl", f"{path}:ShopItems", "-O", str(feed), "--log-json")
    assert code == 0, err
    items = [json.loads(line) for line in feed.read_text().splitlines()]
    expected = 31 if template == "crawl" else 1  # the index and its 30 products, or the index
    assert len(items) == expected
    assert items[0]["url"] == url
    code, _, err = await run_cli(*args)
    assert code == 2
    assert "exists already" in err


async def test_new_refuses_a_bad_name_or_url(tmp_path: Path) -> None:
    code, _, err = await run_cli("new", "9x", "http://127.0.0.1/", "--dir", str(tmp_path))
    assert (code, "NAME: expected a name") == (2, err.split("error: ")[1][:21])
    code, _, err = await run_cli("new", "ok", "ftp://127.0.0.1/", "--dir", str(tmp_path))
    assert code == 2
    assert "URL: expected an http:// or https:// URL" in err
    assert _files(tmp_path) == []


def _files(directory: Path) -> list[Path]:
    return list(directory.iterdir())


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


async def test_parse_shows_the_items_and_the_links_of_one_page(site: Site) -> None:
    url = site.url("/shop/p/3")
    args = ("parse", url, "--spider", CATALOGUE, "--json")
    code, out, err = await run_cli(*args)
    assert code == 0, err
    lines = _lines(out)
    items = [line for line in lines if line["kind"] == "item"]
    assert [(i["depth"], i["page"], i["item"]["sku"]) for i in items] == [(1, url, "SKU-00003")]
    links = sorted(line["url"] for line in lines if line["kind"] == "request")
    assert links == [site.url("/shop/p/4"), site.url("/shop/p/7")]
    assert {line["callback"] for line in lines if line["kind"] == "request"} == {"parse"}
    assert site.paths("/shop/") == ["/shop/p/3"]  # through the downloader: one page, once
    assert site.paths("/robots.txt") == ["/robots.txt"]  # which obeys robots.txt


async def test_parse_depth_2_fetches_the_admitted_links(site: Site) -> None:
    code, out, err = await run_cli(
        "parse", site.url("/shop/p/3"), "--spider", CATALOGUE, "--json", "--depth", "2"
    )
    assert code == 0, err
    pages = {(line["depth"], line["page"]) for line in _lines(out) if line["kind"] == "item"}
    assert pages == {
        (1, site.url("/shop/p/3")), (2, site.url("/shop/p/4")), (2, site.url("/shop/p/7")),
    }  # fmt: skip
    assert sorted(site.paths("/shop/")) == ["/shop/p/3", "/shop/p/4", "/shop/p/7"]


async def test_parse_as_text_and_its_failures(site: Site) -> None:
    code, out, err = await run_cli("parse", site.url("/shop/p/3"), "--spider", CATALOGUE)
    assert code == 0, err
    assert out.startswith(f"# depth 1: 200 {site.url('/shop/p/3')} (parse)\nitem     {{")
    assert f"request  {site.url('/shop/p/4')} -> parse" in out
    code, _, err = await run_cli(
        "parse", site.url("/"), "--spider", CATALOGUE, "--callback", "nope"
    )
    assert code == 2
    assert "--callback: Catalogue has no method 'nope'" in err
    code, out, _ = await run_cli("parse", site.url("/status/404"), "--spider", CATALOGUE, "--json")
    assert code == 1
    assert _lines(out)[-1]["kind"] == "error"
    assert "HttpStatusError" in _lines(out)[-1]["error"]
