"""Control through the monitor, on a real engine; its config; its errors; the history route."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_config
from monitor.control import Control
from monitor.settings import ControlSettings
from netdisco.exceptions import ConfigError, ControlRefused
from netdisco.testing import eventually, free_port
from tests.monitor.service_support import (
    ENGINE_TOKEN,
    MONITOR_TOKEN,
    control_url,
    hanging_server,
    post,
    real_engine,
    steering,
)
from tests.monitor.test_http import _get
from tests.prom_support import PROMTOOL, promtool_check

AUTH = {"Authorization": f"Bearer {MONITOR_TOKEN}"}


def _load(env: dict[str, str], **control: Any) -> Any:
    overrides = {
        "zookeeper.hosts": "127.0.0.1:2181",
        **{f"control.{k}": v for k, v in control.items()},
    }
    return load_config(None, env=env, overrides=overrides)


def test_control_settings_read_tokens_from_variables_and_never_show_them() -> None:
    env = {"ENG": ENGINE_TOKEN, "MON": MONITOR_TOKEN}
    config = _load(env, token_env="ENG", monitor_token_env="MON", timeout=3)
    assert config.control == ControlSettings(
        engine_token=ENGINE_TOKEN, token=MONITOR_TOKEN, timeout=3.0
    )
    assert ENGINE_TOKEN not in repr(config)
    assert MONITOR_TOKEN not in repr(config)
    assert _load({}).control is None  # no [control]: no control routes


@pytest.mark.parametrize(
    ("env", "control", "key", "reason"),
    [
        ({}, {"token_env": "UNSET"}, "control.token_env", "not set"),
        ({}, {"monitor_token_env": "UNSET"}, "control.monitor_token_env", "not set"),
        ({"MON": " "}, {"monitor_token_env": "MON"}, "control.monitor_token_env", "empty"),
        ({}, {"timeout": 0}, "control.timeout", "> 0"),
        ({}, {"timeout": "soon"}, "control.timeout", "soon"),
        ({}, {"tokens": "x"}, "control.tokens", "unknown key"),
    ],
)
def test_bad_control_settings_name_the_key(
    env: dict[str, str], control: dict[str, Any], key: str, reason: str
) -> None:
    with pytest.raises(ConfigError, match=reason) as info:
        _load(env, **control)
    assert info.value.key == key


def test_tokenless_control_off_loopback_is_refused_at_start() -> None:
    overrides = {"zookeeper.hosts": "127.0.0.1:2181", "http.host": "0.0.0.0", "control.timeout": 1}
    with pytest.raises(ConfigError, match="not a loopback address") as info:
        load_config(None, env={}, overrides=overrides)
    assert info.value.key == "control.monitor_token_env"
    env = {"MON": MONITOR_TOKEN}
    overrides["control.monitor_token_env"] = "MON"
    assert load_config(None, env=env, overrides=overrides).control is not None


async def test_pause_resume_stop_through_the_monitor(zk_hosts, start_monitor, site) -> None:
    engine = await real_engine(zk_hosts, site)
    try:
        monitor, _ = await start_monitor(steering(zk_hosts))
        # the engine may register before the monitor's first listing (then it is in the
        # baseline, with no joined event) or after it: either way it becomes a member
        members = monitor.watcher.members
        await eventually(lambda: [m for m in members() if m.name == "crawler-1"], "a member")
        base = monitor.http.url
        pause = control_url(base, "crawler-1", "slowtree", "pause")
        assert (await post(pause))[0] == 401
        status, body = await post(pause, {"Authorization": "Bearer wrong"})
        assert (status, body["error"]["code"]) == (403, "forbidden")
        status, body = await post(pause, {**AUTH, "Origin": "http://evil.example"})
        assert (status, body["error"]["code"]) == (403, "cross_origin")
        assert engine.crawler("slowtree").state == "running"

        assert await post(pause, AUTH) == (200, {"name": "slowtree", "state": "paused"})
        assert engine.crawler("slowtree").state == "paused"
        resume = control_url(base, "crawler-1", "slowtree", "resume")
        assert await post(resume, AUTH) == (200, {"name": "slowtree", "state": "running"})
        status, body = await post(control_url(base, "crawler-1", "slowtree", "explode"), AUTH)
        assert (status, body["error"]["code"]) == (404, "not_found")
        status, body = await post(control_url(base, "crawler-9", "slowtree", "pause"), AUTH)
        assert (status, body["error"]["code"]) == (404, "unknown_engine")
        status, body = await post(control_url(base, "crawler-1", "nobody", "pause"), AUTH)
        assert (status, body["error"]["code"]) == (404, "unknown_spider")  # the engine's answer
        await _history_shows_the_crawl(base)

        status, body = await post(control_url(base, "crawler-1", "slowtree", "stop"), AUTH)
        assert (status, body["state"]) == (200, "stopped")
        await _finished_spiders_show_no_rate(base)
        wrong = Control(ControlSettings(engine_token="not-it"), monitor.watcher.members)
        with pytest.raises(ControlRefused, match="refused the monitor") as info:
            await wrong.act("crawler-1", "slowtree", "pause")
        assert info.value.status == 502
        await wrong.close()
    finally:
        await engine.stop(deadline=1)


async def _history_shows_the_crawl(base: str) -> None:
    async def read() -> dict[str, Any] | None:
        _, body, _ = await _get(f"{base}/netdiscovery/monitor/spiders")
        spiders = {s["name"]: s for s in body["engines"].get("crawler-1", {}).get("spiders", [])}
        slow = spiders.get("slowtree", {})
        samples = [row[1] for row in slow.get("series", []) if row[1] is not None]
        return body if len(samples) >= 3 and slow["succeeded"] > 0 else None

    body = await eventually(read, what="pages/s samples of the running spider")
    assert body["totals"]["spiders"] == 2
    hourly = next(s for s in body["engines"]["crawler-1"]["spiders"] if s["name"] == "hourly")
    # the hourly spider runs too when the suite crosses the top of an hour (its tick)
    ticked = hourly["state"] == "running"
    assert body["totals"]["states"]["running"] == 1 + ticked
    assert body["totals"]["pages"] > 0
    assert hourly["next_run"] % 3600 == 0
    if not ticked:
        assert hourly["pages_per_second"] is None  # idle until its tick: no rate


async def _finished_spiders_show_no_rate(base: str) -> None:
    async def stopped() -> bool:
        _, body, _ = await _get(f"{base}/netdiscovery/monitor/spiders")
        slow = next(s for s in body["engines"]["crawler-1"]["spiders"] if s["name"] == "slowtree")
        return bool(slow["state"] == "stopped" and slow["pages_per_second"] is None)

    await eventually(stopped, what="the stopped spider without a rate")
    _, view, _ = await _get(f"{base}/netdiscovery/monitor")
    assert view["engines"][0]["pages_per_second"] == 0.0


async def test_an_engine_that_is_gone_or_hangs_is_a_clear_error(
    zk_hosts, start_monitor, engines
) -> None:
    hung_port = free_port()
    hung = await hanging_server(hung_port)
    try:
        monitor, _ = await start_monitor(steering(zk_hosts, token=None))
        gone, stuck = (
            await asyncio.to_thread(engines, "gone"),
            await asyncio.to_thread(engines, "stuck"),
        )
        dead_port = free_port()
        dead = f"http://127.0.0.1:{dead_port}/netdiscovery/engine"
        await asyncio.to_thread(gone.join, status_url=dead, port=dead_port)
        await asyncio.to_thread(
            stuck.join,
            status_url=f"http://127.0.0.1:{hung_port}/netdiscovery/engine",
            port=hung_port,
        )
        await eventually(lambda: len(monitor.watcher.members()) == 2, what="both registered")
        base = monitor.http.url
        status, body = await post(
            control_url(base, "gone", "quotes", "pause")
        )  # no token: loopback
        assert (status, body["error"]["code"]) == (502, "engine_unreachable")
        assert "engine 'gone' cannot be reached" in body["error"]["message"]
        status, body = await post(control_url(base, "stuck", "quotes", "stop"))
        assert (status, body["error"]["code"]) == (504, "engine_timeout")
        assert "did not answer within 2.0 s" in body["error"]["message"]
        status, body = await post(
            control_url(base, "gone", "quotes", "pause"), {"Host": "evil.example"}
        )
        assert (status, body["error"]["code"]) == (403, "bad_host")
    finally:
        await hung.cleanup()


async def test_without_a_control_section_nothing_is_steered(zk_hosts, start_monitor) -> None:
    from tests.monitor.conftest import monitor_config

    monitor, _ = await start_monitor(monitor_config(zk_hosts))
    status, body = await post(control_url(monitor.http.url, "any", "any", "pause"))
    assert (status, body["error"]["code"]) == (403, "control_disabled")
    _, history, _ = await _get(f"{monitor.http.url}/netdiscovery/monitor/spiders")
    assert history["control"] is False


async def test_monitor_metrics_count_engines_by_state_and_events_by_type(
    zk_hosts, start_monitor, engines
) -> None:
    monitor, _ = await start_monitor(steering(zk_hosts))
    one, two = await asyncio.to_thread(engines, "one"), await asyncio.to_thread(engines, "two")
    await asyncio.to_thread(one.join)
    await asyncio.to_thread(two.join, state="leaving")
    await eventually(lambda: len(monitor.watcher.members()) == 2, what="both seen")
    _, text, _ = await _get(f"{monitor.http.url}/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    states = {s.labels["state"]: s.value for s in families["netdisco_monitor_engines"].samples}
    assert states == {"running": 1.0, "leaving": 1.0, "unknown": 0.0, "other": 0.0}
    events = {
        s.labels["type"]: s.value
        for s in families["netdisco_monitor_events"].samples
        if s.name.endswith("_total")
    }
    assert events["engine_joined"] == 2.0
    assert events["engine_lost"] == 0.0  # every type is there from the start
    if PROMTOOL is not None:  # the exposition is also checked by Prometheus' own linter
        assert await asyncio.to_thread(promtool_check, text) == (0, "")
