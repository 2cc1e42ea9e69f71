"""The engine's HTTP endpoint over real HTTP: transitions, bad input, metrics, health."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import eventually

from .engine_site import FakeRegistry, site_spider

TOKEN = "tok-0123456789abcdef"
SLOW = Settings(progress_interval=0, concurrency=1)  # ~10 s on the slow pages: time to drive it


class Client:
    """A tiny JSON client for one engine; remembers every body it saw."""

    def __init__(self, session: aiohttp.ClientSession, engine: SpiderEngine, token: str | None):
        self.session = session
        self.base = f"http://127.0.0.1:{engine.port}"
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.seen: list[str] = []

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        kwargs.setdefault("headers", self.auth)
        async with self.session.request(method, self.base + path, **kwargs) as response:
            text = await response.text()
        self.seen.append(text)
        assert response.status != 500, text
        if response.content_type == "application/json":
            return response.status, json.loads(text)
        return response.status, text

    async def control(self, name: str, action: str) -> tuple[int, Any]:
        return await self.call("POST", f"/netdiscovery/spiders/{name}/{action}")


@pytest.fixture(params=[False, True], ids=["in-loop", "api-process"])
async def engines(site: str, request: pytest.FixtureRequest) -> AsyncIterator[list[SpiderEngine]]:
    """Two engines in this one loop, each with two slow spiders; the first needs a token.
    Every test runs twice: the endpoint in the engine's loop, and in its status process."""
    child = bool(request.param)
    result = [
        SpiderEngine(
            EngineSettings(id="e-tok", port=0, token=TOKEN, max_body=2048, api_process=child)
        ),
        SpiderEngine(EngineSettings(id="e-open", port=0, api_process=child)),
    ]
    for engine in result:
        engine.add_spider(site_spider("one", site, "slow"), SLOW)
        engine.add_spider(site_spider("two", site, "slow"), SLOW)
        await engine.start()
    yield result
    for engine in result:
        await engine.stop(deadline=1.0)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def test_every_transition_over_http_on_two_engines(
    engines: list[SpiderEngine], session: aiohttp.ClientSession
) -> None:
    for engine, token in zip(engines, (TOKEN, None), strict=True):
        api = Client(session, engine, token)
        script = [
            ("one", "pause", 200, "paused"),
            ("one", "pause", 409, "paused"),
            ("one", "resume", 200, "running"),
            ("one", "resume", 409, "running"),
            ("one", "stop", 200, "stopped"),
            ("one", "stop", 409, "stopped"),
            ("one", "pause", 409, "stopped"),
            ("two", "pause", 200, "paused"),
            ("two", "stop", 200, "stopped"),
            ("two", "resume", 409, "stopped"),
        ]
        for name, action, status, state in script:
            code, body = await api.control(name, action)
            assert code == status, (engine.id, name, action, body)
            if status == 200:
                assert body == {"name": name, "state": state}
            else:
                assert body["error"]["code"] == "invalid_transition"
                assert f"cannot {action} while {state}" in body["error"]["message"]
            _, listed = await api.call("GET", "/netdiscovery/spiders")
            assert {s["name"]: s["state"] for s in listed}[name] == state
    assert [c.state for e in engines for c in e.crawlers()] == ["stopped"] * 4


async def test_status_routes_show_the_design_fields(
    engines: list[SpiderEngine], session: aiohttp.ClientSession
) -> None:
    api = Client(session, engines[0], None)
    code, one = await api.call("GET", "/netdiscovery/spiders/one")
    assert code == 200
    fields = {"name", "state", "started_at", "scheduled", "in_flight", "succeeded", "failed"}
    fields |= {"retried", "filtered", "items", "bytes", "queue_size", "seen"}
    assert fields | {"pages_per_second", "last_error"} <= set(one)
    await eventually(lambda: engines[0].crawler("one").stats.items > 0)
    code, info = await api.call("GET", "/netdiscovery/engine")
    assert code == 200
    assert (info["id"], info["port"], info["registry"]) == ("e-tok", engines[0].port, None)
    assert info["status_url"] == f"{api.base}/netdiscovery/engine"
    assert [s["name"] for s in info["spiders"]] == ["one", "two"]
    code, health = await api.call("GET", "/netdiscovery/health")
    assert (code, health["status"], health["registry"]) == (200, "ok", "standalone")


async def test_pushing_a_mix_accepts_the_valid_and_explains_the_rest(
    engines: list[SpiderEngine], session: aiohttp.ClientSession, site: str
) -> None:
    api = Client(session, engines[0], TOKEN)
    crawler = engines[0].crawler("two")
    scheduled = crawler.stats.scheduled
    urls = [f"{site}/fast/p/3", "ftp://example.org/x", "http://other.invalid/", 5]
    urls += [f"{site}/fast/p/3", f"{site}/fast/p/4"]
    code, body = await api.call("POST", "/netdiscovery/spiders/two/requests", json={"urls": urls})
    assert code == 202
    assert body["accepted"] == 2
    reasons = {r["url"]: r["reason"] for r in body["rejected"]}
    assert set(reasons) == {"ftp://example.org/x", "http://other.invalid/", 5, f"{site}/fast/p/3"}
    assert len(body["rejected"]) == 4
    assert all(isinstance(r["reason"], str) and r["reason"] for r in body["rejected"])
    assert crawler.stats.scheduled >= scheduled + 2


BAD_INPUT = [
    # (method, path, kwargs, status, code)
    ("GET", "/netdiscovery/spiders/nobody", {}, 404, "unknown_spider"),
    ("POST", "/netdiscovery/spiders/nobody/pause", {}, 404, "unknown_spider"),
    ("GET", "/netdiscovery/nothing", {}, 404, "not_found"),
    (
        "PUT",
        "/netdiscovery/spiders/one",
        {},
        405,
        "method_not_allowed",
    ),  # DELETE is a route (issue 16)
    ("POST", "/netdiscovery/spiders/one/requests", {"data": b"{bad"}, 415, None),
    (
        "POST",
        "/netdiscovery/spiders/one/requests",
        {"data": b"{bad", "headers_extra": {"Content-Type": "application/json"}},
        400,
        "invalid_json",
    ),
    ("POST", "/netdiscovery/spiders/one/requests", {"json": {"url": "x"}}, 400, "invalid_body"),
    ("POST", "/netdiscovery/spiders/one/requests", {"json": [1]}, 400, "invalid_body"),
    ("POST", "/netdiscovery/spiders/one/requests", {"json": {"urls": []}}, 400, "invalid_body"),
    (
        "POST",
        "/netdiscovery/spiders/one/requests",
        {"json": {"urls": ["http://127.0.0.1/" + "x" * 4000]}},
        413,
        "payload_too_large",
    ),
    (
        "POST",
        "/netdiscovery/spiders/one/requests",
        {"data": b"\xff\xfe", "headers_extra": {"Content-Type": "application/json"}},
        400,
        "invalid_json",
    ),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "code"), BAD_INPUT)
async def test_bad_input_gets_a_json_error_never_a_500(
    engines: list[SpiderEngine],
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    code: str | None,
) -> None:
    api = Client(session, engines[0], TOKEN)
    kwargs = dict(kwargs)
    kwargs["headers"] = {**api.auth, **kwargs.pop("headers_extra", {})}
    got, body = await api.call(method, path, **kwargs)
    assert got == status, body
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == (code or "unsupported_media_type")


async def test_token_is_checked_and_never_shown(
    engines: list[SpiderEngine], session: aiohttp.ClientSession
) -> None:
    with capture_logs() as logs:
        api = Client(session, engines[0], None)
        code, body = await api.control("one", "pause")
        assert (code, body["error"]["code"]) == (401, "unauthorized")
        code, body = await api.call(
            "POST", "/netdiscovery/spiders/one/pause", headers={"Authorization": "Basic eA=="}
        )
        assert code == 401
        wrong = Client(session, engines[0], TOKEN[:-1] + "X")
        code, body = await wrong.control("one", "pause")
        assert (code, body["error"]["code"]) == (403, "forbidden")
        code, _ = await wrong.call("POST", "/netdiscovery/spiders/one/requests", data=b"x")
        assert code == 403  # the token is checked before the body is looked at
        right = Client(session, engines[0], TOKEN)
        assert (await right.control("one", "pause"))[0] == 200
        for path in ("/netdiscovery/engine", "/netdiscovery/spiders", "/metrics"):
            assert (await right.call("GET", path))[0] == 200
        open_engine = Client(session, engines[1], None)
        assert (await open_engine.control("one", "pause"))[0] == 200
    seen = api.seen + wrong.seen + right.seen + [repr(logs), repr(engines[0].settings)]
    assert not [text for text in seen if TOKEN in text]


async def test_metrics_parse_as_prometheus_text(
    engines: list[SpiderEngine], session: aiohttp.ClientSession
) -> None:
    await eventually(lambda: all(c.stats.items > 0 for e in engines for c in e.crawlers()))
    api = Client(session, engines[1], None)
    await api.control("two", "pause")
    code, text = await api.call("GET", "/metrics")
    assert code == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = families["netdisco_requests"]
    assert requests.type == "counter"
    succeeded = {
        s.labels["spider"]: s.value for s in requests.samples if s.labels["outcome"] == "succeeded"
    }
    assert set(succeeded) == {"one", "two"}
    assert all(v > 0 for v in succeeded.values())
    states = {
        (s.labels["spider"], s.labels["state"]): s.value
        for s in families["netdisco_spider_state"].samples
    }
    assert states[("two", "paused")] == 1.0
    assert states[("two", "running")] == 0.0
    assert states[("one", "running")] == 1.0
    items = {s.labels["spider"]: s.value for s in families["netdisco_items"].samples}
    assert items["one"] > 0
    assert {"netdisco_queue_size", "netdisco_engine_info"} <= set(families)
    info = families["netdisco_engine_info"].samples[0]
    assert info.labels["engine"] == "e-open"


async def test_health_is_503_when_registration_is_lost(
    site: str, session: aiohttp.ClientSession
) -> None:
    registries: list[FakeRegistry] = []

    def factory(engine_id: str, describe: Any) -> FakeRegistry:
        registries.append(FakeRegistry(engine_id, describe, []))
        return registries[-1]

    async with SpiderEngine(EngineSettings(port=0), registry_factory=factory) as engine:
        engine.add_spider(site_spider("one", site, "slow"), SLOW)
        await engine.start()
        api = Client(session, engine, None)
        assert (await api.call("GET", "/netdiscovery/health"))[0] == 200
        registries[0].healthy = False
        code, body = await api.call("GET", "/netdiscovery/health")
        assert (code, body["status"], body["registry"]) == (503, "degraded", "expired")
        code, info = await api.call("GET", "/netdiscovery/engine")
        assert info["registry"] == {"state": "expired"}
        _, text = await api.call("GET", "/metrics")
        assert "netdisco_engine_registered 0.0" in text


async def test_a_bug_answers_a_logged_json_500(
    engines: list[SpiderEngine], session: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(engines[1].crawler("one"), "status", broken)
    url = f"http://127.0.0.1:{engines[1].port}/netdiscovery/spiders/one"

    async def answer() -> tuple[int, Any] | None:
        async with session.get(url) as response:
            body = await response.json()
        return (response.status, body) if response.status != 200 else None

    with capture_logs() as logs:
        # the status process may serve its last good answer for up to status_cache s
        status, body = await eventually(answer, "the broken status to be answered")
    assert status == 500
    assert body["error"]["code"] == "internal_error"
    assert {e["event"] for e in logs if e["log_level"] == "error"} == {"http_handler_failed"}
