"""Least privilege for the control API (issue 27, findings 1-4 and 10), on loopback only.

A token holder may start spiders from ``spider_modules`` with the settings
``HTTP_SETTINGS`` names; these tests are the attacks that found the holes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from netdisco.crawl import settings as crawl_settings
from netdisco.crawl.feeds.spec import parse_feeds
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings, engine_settings
from netdisco.engine.launch import HTTP_REFUSED, HTTP_SETTINGS
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually, serve

from .engine_site import SiteSpider
from .service.spiders import SITE_ENV

TOKEN = "tok-security-0123456789"
TREE = "tests.netdisco.service.spiders:Tree"
QUIET = crawl_settings.Settings(progress_interval=0, concurrency=1)


@pytest.fixture
def feeds_dir(tmp_path: Path) -> Path:
    path = tmp_path / "feeds"
    path.mkdir()
    return path


@pytest.fixture
async def engine(
    site: str, feeds_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SpiderEngine]:
    monkeypatch.setenv(SITE_ENV, site)
    settings = EngineSettings(
        id="sec",
        port=0,
        token=TOKEN,
        spider_modules=("tests.netdisco.service",),
        feeds_dir=str(feeds_dir),
    )
    engine = SpiderEngine(settings)
    slow = [f"{site}/slow/p/0"]  # a long crawl: the spiders still run when pushed to
    engine.add_spider(SiteSpider(name="open", start_urls=slow, allowed_domains=()), QUIET)
    trusting = QUIET.replace(allow_private_targets=True)
    engine.add_spider(SiteSpider(name="trusting", start_urls=slow, allowed_domains=()), trusting)
    await engine.start()
    yield engine
    await engine.stop(deadline=1)


async def call(engine: SpiderEngine, path: str, body: bytes) -> tuple[int, Any]:
    """POST raw JSON bytes; the status and the answer, which must be strict JSON."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    url = f"http://127.0.0.1:{engine.port}/netdiscovery{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        text = await response.text()
        return response.status, json.loads(text, parse_constant=_strict)


def _strict(name: str) -> Any:
    raise AssertionError(f"the answer holds {name}, which is not JSON")


async def launch(engine: SpiderEngine, **body: Any) -> tuple[int, Any]:
    return await call(engine, "/spiders", json.dumps({"spider": TREE, **body}).encode())


def refused(answer: Any, code: str = "setting_not_allowed") -> str:
    assert answer["error"]["code"] == code, answer
    return str(answer["error"].get("key"))


# -- 1. least privilege: settings, middlewares, feeds, names ---------------------------


def test_every_crawl_setting_is_either_allowed_or_refused_over_http() -> None:
    fields = {f.name for f in dataclasses.fields(crawl_settings.Settings)}
    assert HTTP_SETTINGS | set(HTTP_REFUSED) == fields
    assert not HTTP_SETTINGS & set(HTTP_REFUSED)


async def test_settings_a_token_holder_may_not_set_are_refused_and_named(
    engine: SpiderEngine, tmp_path: Path
) -> None:
    table = {
        "allow_private_targets": True,
        "chromium": "/bin/sh",
        "proxies": ["http://127.0.0.1:9/"],
        "frontier": "redis://127.0.0.1:9/0",
        "state_dir": str(tmp_path / "state"),
    }
    status, answer = await launch(engine, settings=table)
    assert status == 400
    assert refused(answer) == "settings.allow_private_targets"
    assert all(name in answer["error"]["message"] for name in table)
    assert [c.name for c in engine.crawlers()] == ["open", "trusting"]
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"ITEM_PIPELINES": {"os.system": 1}}, "settings.item_pipelines"),
        ({"JOBDIR": "/tmp/netdisco-security-jobdir"}, "settings.state_dir"),
        ({"HTTPCACHE_DIR": "/tmp/netdisco-security-cache"}, "settings.http_cache"),
        ({"FEEDS": {"/tmp/netdisco-security-abs.jsonl": {}}}, "settings.feeds"),
    ],
)
async def test_a_scrapy_name_is_held_by_the_setting_it_stands_for(
    engine: SpiderEngine, table: dict[str, Any], key: str
) -> None:
    """Scrapy's names (a Scrapyd ``setting=`` sends them) are no way around the refusals."""
    status, answer = await launch(engine, settings=table)
    assert status == 400, answer
    assert answer["error"]["key"].startswith(key)
    assert "tree" not in {c.name for c in engine.crawlers()}


@pytest.mark.parametrize("ref", ["json:JSONDecoder", "os:getcwd", "tests.netdisco.sites:Any"])
async def test_middlewares_come_only_from_spider_modules(engine: SpiderEngine, ref: str) -> None:
    status, answer = await launch(engine, settings={"middlewares": [ref]})
    assert (status, refused(answer)) == (400, "settings.middlewares")
    assert "tree" not in {c.name for c in engine.crawlers()}


async def test_a_middleware_from_spider_modules_is_taken(engine: SpiderEngine) -> None:
    ref = "tests.netdisco.service.spiders:Tagging"
    status, answer = await launch(engine, settings={"middlewares": [ref], "max_pages": 2})
    assert status == 201, answer
    assert engine.crawler("tree").settings.middlewares == (ref,)


@pytest.mark.parametrize(
    ("uri", "options"),
    [
        ("/tmp/netdisco-security-abs.jsonl", {}),
        ("../up.jsonl", {}),
        ("a/../../up.jsonl", {}),
        ("{spider}/../../up.jsonl", {}),
        ("file:///tmp/netdisco-security-abs.jsonl", {}),
        ("sqlite:////tmp/netdisco-security-abs.db", {}),
        ("-", {}),
        ("sitecustomize.py", {"format": "csv", "fields": ["import os", "os"]}),
        ("items.csv.py", {"format": "csv"}),
        (".pth", {"format": "jsonl"}),
        ("a\\..\\..\\up.jsonl", {}),
        ("a\x00b.jsonl", {}),  # was a 500
        ("a\nb.jsonl", {}),
    ],
)
async def test_a_feed_outside_feeds_dir_is_refused(
    engine: SpiderEngine, feeds_dir: Path, uri: str, options: dict[str, Any]
) -> None:
    status, answer = await launch(engine, settings={"feeds": {uri: options}})
    assert status == 400, answer
    assert answer["error"]["key"].startswith("settings.feeds")
    assert "tree" not in {c.name for c in engine.crawlers()}
    assert list(feeds_dir.parent.rglob("*.py")) == []
    assert not (feeds_dir.parent / "up.jsonl").exists()


async def test_a_symbolic_link_out_of_feeds_dir_is_refused(
    engine: SpiderEngine, feeds_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (feeds_dir / "link").symlink_to(outside)
    status, answer = await launch(engine, settings={"feeds": {"link/items.jsonl": {}}})
    assert (status, answer["error"]["code"]) == (400, "feed_not_allowed"), answer
    assert list(outside.iterdir()) == []


async def test_an_engine_without_feeds_dir_takes_no_feeds_over_http(site: str) -> None:
    settings = EngineSettings(port=0, token=TOKEN, spider_modules=("tests.netdisco.service",))
    async with SpiderEngine(settings) as engine:
        await engine.start()
        status, answer = await launch(engine, settings={"feeds": {"items.jsonl": {}}})
        assert (status, refused(answer)) == (400, "settings.feeds")


async def test_a_feed_over_http_is_written_under_feeds_dir(
    engine: SpiderEngine, feeds_dir: Path
) -> None:
    feeds = {"{spider}/items.csv": {"fields": ["url", 'ti"tle\nimport os']}}
    status, answer = await launch(engine, settings={"feeds": feeds, "max_pages": 3})
    assert status == 201, answer
    await eventually(lambda: engine.crawler("tree").state == "finished", what="tree finished")
    written = feeds_dir / "tree" / "items.csv"
    lines = written.read_text().splitlines()
    assert lines[0] == 'url,"ti""tle'  # the header is CSV data: quoted, never a raw line
    assert lines[1] == 'import os"'
    assert len(lines) == 2 + 3


@pytest.mark.parametrize("name", ["..", "a\r\nb", "a/b", ".hidden", "-x", "a..b", "x" * 65, ""])
async def test_spider_names_match_one_strict_pattern(engine: SpiderEngine, name: str) -> None:
    status, answer = await launch(engine, name=name)
    assert (status, refused(answer, "invalid_value")) == (400, "name")
    assert len(engine.crawlers()) == 2


async def test_a_strict_name_is_taken(engine: SpiderEngine) -> None:
    status, answer = await launch(engine, name="Tree_2.b-c", settings={"max_pages": 1})
    assert (status, answer["name"]) == (201, "Tree_2.b-c")


# -- 2. a token variable that is not set ------------------------------------------------


@pytest.mark.parametrize("environ", [{}, {"MY_TOKEN": ""}, {"MY_TOKEN": "  "}])
def test_a_named_token_variable_that_is_unset_or_empty_is_an_error(
    environ: dict[str, str],
) -> None:
    with pytest.raises(ConfigError, match="MY_TOKEN") as info:
        engine_settings({"token_env": "MY_TOKEN"}, environ=environ)
    assert info.value.key == "engine.token_env"
    with pytest.raises(ConfigError, match="MY_TOKEN"):
        engine_settings({}, environ={**environ, "NETDISCO_ENGINE_TOKEN_ENV": "MY_TOKEN"})


def test_the_default_variable_may_be_unset_and_a_set_one_is_read() -> None:
    assert engine_settings({}, environ={}).token is None  # loopback control, as documented
    assert engine_settings({"token_env": "T"}, environ={"T": "s3cret"}).token == "s3cret"


def test_the_engine_command_exits_2_naming_the_unset_variable(tmp_path: Path) -> None:
    config = tmp_path / "engine.toml"
    config.write_text('[engine]\nport = 0\ntoken_env = "NETDISCO_SECURITY_UNSET"\n')
    env = {k: v for k, v in os.environ.items() if k != "NETDISCO_SECURITY_UNSET"}
    done = subprocess.run(
        [sys.executable, "-m", "netdisco.cli", "engine", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "NETDISCO_SECURITY_UNSET" in done.stderr
    assert "engine_started" not in done.stderr + done.stdout


# -- 3. the private-address fence sees the host the fetch will use -------------------


@pytest.fixture
async def loopback_hits() -> AsyncIterator[tuple[int, list[str]]]:
    """A loopback server that records every request it gets."""
    hits: list[str] = []

    async def record(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="<h1>internal</h1>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", record)
    async with serve(app) as base:
        yield int(base.rsplit(":", 1)[1]), hits


UNICODE_FORMS = [  # the four forms of the issue, spelled out: fullwidth digits, ideographic
    # full stops, circled digits, fullwidth letters
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{port}/fullwidth",
    "http://127\u30020\u30020\u30021:{port}/ideographic",
    "http://\u2460\u2461\u2466.0.0.1:{port}/circled",
    "http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:{port}/letters",
]
ASCII_FORMS = [
    "http://127.1:{port}/short",
    "http://0x7f.0.0.1:{port}/hex",
    "http://2130706433:{port}/number",
    "http://127.0.0.1.:{port}/dot",
    "http://LOCALHOST.:{port}/upper",
    "http://127%2e0%2e0%2e1:{port}/escaped",
]


async def push(engine: SpiderEngine, spider: str, urls: list[str]) -> dict[str, Any]:
    body = json.dumps({"urls": urls}).encode()
    status, answer = await call(engine, f"/spiders/{spider}/requests", body)
    assert status == 202, answer
    result: dict[str, Any] = answer
    return result


async def test_unicode_and_ascii_forms_of_loopback_are_refused_and_never_fetched(
    engine: SpiderEngine, loopback_hits: tuple[int, list[str]]
) -> None:
    port, hits = loopback_hits
    urls = [form.format(port=port) for form in UNICODE_FORMS + ASCII_FORMS]
    scheduled = engine.crawler("open").stats.scheduled
    result = await push(engine, "open", urls)
    assert result["accepted"] == 0, result
    assert {r["url"] for r in result["rejected"]} == set(urls)
    assert all("allow_private_targets" in r["reason"] for r in result["rejected"])
    # refused before the frontier (a push admits synchronously): nothing queued that a
    # worker could fetch later, and nothing fetched on the way
    assert engine.crawler("open").stats.scheduled == scheduled
    assert hits == []


async def test_the_same_forms_do_reach_loopback_when_the_spider_allows_it(
    engine: SpiderEngine, loopback_hits: tuple[int, list[str]]
) -> None:
    """The control: these forms are fetched at that server, so the test above can fail."""
    port, hits = loopback_hits
    urls = [form.format(port=port) for form in UNICODE_FORMS]
    assert (await push(engine, "trusting", urls))["accepted"] == len(urls)
    pages = ["/circled", "/fullwidth", "/ideographic", "/letters"]
    await eventually(lambda: set(pages) <= set(hits), what="the pushed pages fetched")


# -- 4. feed templates -------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    ["{spider:>100000}.jsonl", "{spider!r}.jsonl", "{spider:>{engine}}.jsonl", "{spider!s:x}.csv"],
)
def test_a_feed_template_takes_no_format_spec_or_conversion(uri: str) -> None:
    with pytest.raises(ConfigError, match="format spec or conversion"):
        parse_feeds("feeds", {uri: {}})


async def test_a_format_spec_over_http_is_a_400(engine: SpiderEngine) -> None:
    feeds: dict[str, Any] = {"{spider:>1000000000}.jsonl": {}}
    status, answer = await launch(engine, settings={"feeds": feeds})
    assert (status, answer["error"]["code"]) == (400, "invalid_value")
    assert refused(answer, "invalid_value").startswith("settings.feeds.")


# -- 10. bodies and bounds -------------------------------------------------------------


async def test_a_lone_surrogate_is_a_400(engine: SpiderEngine) -> None:
    body = b'{"urls": ["http://example.invalid/\\ud800"]}'
    status, answer = await call(engine, "/spiders/open/requests", body)
    assert (status, answer["error"]["code"]) == (400, "invalid_json")


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
async def test_nan_and_infinity_are_refused_not_echoed(
    engine: SpiderEngine, constant: bytes
) -> None:
    status, answer = await call(engine, "/spiders/open/requests", b'{"urls": [%s]}' % constant)
    assert (status, answer["error"]["code"]) == (400, "invalid_json")
    body = b'{"spider": "%s", "settings": {"concurrency": %s}}' % (TREE.encode(), constant)
    status, answer = await call(engine, "/spiders", body)
    assert (status, answer["error"]["code"]) == (400, "invalid_json")


def test_a_redis_url_with_a_bad_port_is_a_config_error_and_exit_2(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        crawl_settings.from_mapping({"frontier": "redis://x:notaport/0"})
    assert info.value.key == "frontier"
    spider, bad = tmp_path / "one.py", "frontier=redis://x:notaport/0"
    spider.write_text(
        "from netdisco import Spider\n\nclass One(Spider):\n    name = 'one'\n"
        "    start_urls = ['http://127.0.0.1:9/']\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "netdisco.cli", "crawl", f"{spider}:One", "-s", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "frontier" in done.stderr


@pytest.mark.parametrize(
    ("name", "highest"),
    [
        ("concurrency", 10_000),
        ("per_host_concurrency", 10_000),
        ("render_concurrency", 256),
        ("item_buffer", 10**6),
        ("flush_items", 10**6),
        ("max_response_size", 1024**3),
    ],
)
def test_settings_that_size_memory_have_upper_bounds(name: str, highest: int) -> None:
    assert getattr(crawl_settings.from_mapping({name: highest}), name) == highest
    with pytest.raises(ConfigError) as info:
        crawl_settings.from_mapping({name: highest + 1})
    assert info.value.key == name


async def test_concurrency_of_ten_million_over_http_is_a_400(engine: SpiderEngine) -> None:
    status, answer = await launch(engine, settings={"concurrency": 10_000_000})
    assert (status, refused(answer, "invalid_value")) == (400, "settings.concurrency")
