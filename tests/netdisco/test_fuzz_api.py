"""Fuzzing the engine's HTTP endpoint: random methods, paths, headers and bodies against
a real engine on loopback. Whatever arrives, the answer is never a 500.

The spider denies every URL but its one seed (a page of the test site that never
answers, so the spider stays running), so nothing a fuzzed push names is ever
fetched: all traffic stays between this test, the engine and the test site.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from tests.fuzzing import examples

from .engine_site import SiteSpider
from .test_api_hardening import raw_request

pytestmark = pytest.mark.fuzz

TOKEN = "tok-fuzz-0123456789"
ROUTES = [
    "/netdiscovery/health",
    "/netdiscovery/engine",
    "/netdiscovery/spiders",
    "/netdiscovery/spiders/fuzzed",
    "/netdiscovery/spiders/fuzzed/pause",
    "/netdiscovery/spiders/fuzzed/resume",
    "/netdiscovery/spiders/fuzzed/requests",
    "/netdiscovery/spiders/nobody/requests",
    "/metrics",
]


@pytest.fixture(params=[False, True], ids=["in-loop", "api-process"])
async def engine(site: str, request: pytest.FixtureRequest) -> AsyncIterator[SpiderEngine]:
    """The engine, its endpoint in its loop or behind its status process."""
    settings = EngineSettings(
        id="e-fuzz", port=0, token=TOKEN, max_body=65536, api_process=bool(request.param)
    )
    served = SpiderEngine(settings)
    seed = f"{site}/hang"
    spider = SiteSpider(name="fuzzed", start_urls=[seed], allowed_domains=["127.0.0.1"])
    only_the_seed = (f"^(?!{re.escape(seed)}$)",)
    served.add_spider(spider, Settings(progress_interval=0, deny=only_the_seed, obey_robots=False))
    await served.start()
    yield served
    await served.stop(deadline=1.0)


_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_bodies = st.one_of(
    st.binary(max_size=300),
    _json.map(lambda v: json.dumps(v).encode()),
    st.lists(st.one_of(st.text(max_size=60), _json), max_size=8).map(
        lambda urls: json.dumps({"urls": urls}).encode()
    ),
    st.integers(1, 50_000).map(lambda depth: b"[" * depth + b"]" * depth),
)
_paths = st.one_of(
    st.sampled_from(ROUTES),
    st.tuples(st.sampled_from(ROUTES), st.binary(max_size=30)).map(
        lambda p: p[0].encode() + bytes(b for b in p[1] if b > 32 and b != 127)
    ),
)
_value = st.binary(max_size=80).map(lambda v: bytes(b for b in v if b not in b"\r\n"))
_auth = st.one_of(
    st.just(b"Bearer " + TOKEN.encode()),
    _value.map(lambda v: b"Bearer " + v),
    _value,
)
_headers = st.lists(
    st.tuples(
        st.sampled_from([b"Content-Type", b"Accept", b"Cookie", b"X-Fuzz", b"Content-Encoding"]),
        st.one_of(st.just(b"application/json"), _value),
    ),
    max_size=4,
)


def _head(method: bytes, path: bytes, headers: list[tuple[bytes, bytes]], length: int) -> bytes:
    lines = [method + b" " + (path if isinstance(path, bytes) else path.encode()) + b" HTTP/1.1"]
    lines += [b"Host: 127.0.0.1", *(name + b": " + value for name, value in headers)]
    lines += [b"Content-Length: %d" % length, b"Connection: close"]
    return b"\r\n".join(lines)


#: POST and GET weigh more: they are what the routes take
_METHODS = [b"POST"] * 4 + [b"GET"] * 2 + [b"PUT", b"DELETE", b"HEAD", b"PATCH", b"OPTIONS"]


@examples(100)
@given(
    method=st.sampled_from(_METHODS)
    | st.binary(min_size=1, max_size=8).map(lambda m: bytes(b for b in m if 32 < b < 127) or b"X"),
    path=_paths,
    auth=st.one_of(st.none(), _auth),
    headers=_headers,
    body=_bodies,
)
async def test_the_api_never_answers_500(
    engine: SpiderEngine,
    method: bytes,
    path: bytes | str,
    auth: bytes | None,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> None:
    path = path if isinstance(path, bytes) else path.encode()
    if auth is not None:
        headers = [*headers, (b"Authorization", auth)]
    status, answer = await raw_request(engine.port, _head(method, path, headers, len(body)), body)
    assert status < 500, (status, answer[:300])


@examples(60)
@given(
    path=st.sampled_from([r for r in ROUTES if r.count("/") == 4]),
    auth=_auth,
    headers=_headers,
    body=_bodies,
)
async def test_control_routes_never_answer_500_whatever_the_headers(
    engine: SpiderEngine,
    path: str,
    auth: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
) -> None:
    head = _head(b"POST", path.encode(), [*headers, (b"Authorization", auth)], len(body))
    status, answer = await raw_request(engine.port, head, body)
    assert status < 500, (status, answer[:300])
