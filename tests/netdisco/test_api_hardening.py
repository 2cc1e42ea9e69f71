"""Malformed input gets a 4xx, never a 500; pushes cannot aim the engine at its own network.

A real engine on loopback, spoken to over raw sockets where aiohttp's client would
refuse to send the malformed bytes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.engine.targets import private_target

from .engine_site import SiteSpider

TOKEN = "tok-hardening-0123456789"
QUIET = Settings(progress_interval=0, concurrency=1)


@pytest.fixture
async def engine(site: str) -> AsyncIterator[SpiderEngine]:
    served = SpiderEngine(EngineSettings(id="e-hard", port=0, token=TOKEN, max_body=1 << 20))
    served.add_spider(
        SiteSpider(name="open", start_urls=[f"{site}/slow/p/0"], allowed_domains=()), QUIET
    )
    served.add_spider(SiteSpider(name="named", start_urls=[f"{site}/slow/p/0"]), QUIET)
    served.add_spider(
        SiteSpider(name="trusting", start_urls=[f"{site}/slow/p/0"], allowed_domains=()),
        QUIET.replace(allow_private_targets=True),
    )
    await served.start()
    yield served
    await served.stop(deadline=1.0)


async def raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send bytes as they are; the status code and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + b"\r\n\r\n" + body)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def post(path: str, *headers: bytes, length: int = 0) -> bytes:
    lines = [b"POST " + path.encode() + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    return b"\r\n".join([*lines, *headers, b"Content-Length: %d" % length])


@pytest.mark.parametrize(
    "authorization",
    [b"Bearer \xff\xfe\xfd", b"Bearer tok-\xc3\x28", b"\xff\xff \xff", b"Bearer " + b"\x80" * 64],
)
async def test_a_non_utf8_authorization_header_is_a_401(
    engine: SpiderEngine, authorization: bytes
) -> None:
    head = post("/netdiscovery/spiders/open/pause", b"Authorization: " + authorization)
    status, body = await raw_request(engine.port, head)
    assert status in (400, 401), body
    assert engine.crawler("open").state.value == "running"


async def test_deeply_nested_json_is_a_400(engine: SpiderEngine) -> None:
    body = b"[" * 200_000 + b"]" * 200_000
    head = post(
        "/netdiscovery/spiders/open/requests",
        b"Authorization: Bearer " + TOKEN.encode(),
        b"Content-Type: application/json",
        length=len(body),
    )
    status, answer = await raw_request(engine.port, head, body)
    assert status == 400, answer
    assert json.loads(answer)["error"]["code"] == "invalid_json"


INTERNAL = [
    "http://127.0.0.1:9/",
    "http://127.1/",
    "http://2130706433/",
    "http://0x7f.0.0.1/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://localhost:8000/admin",
    "http://api.localhost/",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.1.2.3/",
    "http://172.16.0.1/",
    "http://192.168.1.1/",
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://0.0.0.0/",
]


async def push(engine: SpiderEngine, spider: str, urls: list[Any]) -> dict[str, Any]:
    data = json.dumps({"urls": urls}).encode()
    head = post(
        f"/netdiscovery/spiders/{spider}/requests",
        b"Authorization: Bearer " + TOKEN.encode(),
        b"Content-Type: application/json",
        length=len(data),
    )
    status, answer = await raw_request(engine.port, head, data)
    assert status == 202, answer
    result: dict[str, Any] = json.loads(answer)
    return result


async def test_internal_targets_are_refused_without_allowed_domains(engine: SpiderEngine) -> None:
    scheduled = engine.crawler("open").stats.scheduled
    result = await push(engine, "open", [*INTERNAL, "http://example.test/"])
    refused = {r["url"]: r["reason"] for r in result["rejected"]}
    assert set(refused) == set(INTERNAL)
    assert all("allow_private_targets" in reason for reason in refused.values())
    assert result["accepted"] == 1
    assert engine.crawler("open").stats.scheduled == scheduled + 1


async def test_allowed_domains_or_the_setting_let_internal_targets_in(
    engine: SpiderEngine, site: str
) -> None:
    named = await push(engine, "named", [f"{site}/fast/p/7", "http://10.1.2.3/"])
    assert named["accepted"] == 1
    assert [r["url"] for r in named["rejected"]] == ["http://10.1.2.3/"]  # not named
    trusting = await push(engine, "trusting", [f"{site}/fast/p/7", "http://[::1]:9/"])
    assert (trusting["accepted"], trusting["rejected"]) == (2, [])


@pytest.mark.parametrize(
    "url",
    ["http://example.org/", "https://93.184.216.34/", "http://[2606:4700::1111]/", "mailto:x"],
)
def test_public_or_non_urls_pass_the_private_check(url: str) -> None:
    assert private_target(url, ()) is None
