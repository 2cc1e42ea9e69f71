"""Offline alerts through real servers: SMTP (aiosmtpd), a webhook, a command, a callable."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from monitor.alerts import Alerts
from monitor.events import Event, EventType
from monitor.metrics import Metrics
from monitor.settings import AlertSettings
from netdisco.exceptions import ConfigError
from netdisco.testing import eventually
from tests.monitor import hook_targets
from tests.monitor.conftest import monitor_config

EMAIL = {"sender": "netdisco@example.org", "to": ["ops@example.org"], "events": ["engine_lost"]}


def _email(smtp: Any, **extra: Any) -> dict[str, Any]:
    return {**EMAIL, "port": smtp.port, **extra}


def _value(monitor: Any, name: str, hook: str) -> float:
    value = monitor.metrics.registry.get_sample_value(name, {"hook": hook})
    return value or 0.0


async def _lose(engines: Any, rec: Any, name: str) -> None:
    engine = await asyncio.to_thread(engines, name)
    await asyncio.to_thread(engine.join)
    await eventually(lambda: rec.of("engine_joined", name))
    await asyncio.to_thread(engine.vanish)  # gone without "leaving": lost


async def test_sigkilled_engine_email_has_its_details(
    zk_hosts, start_monitor, engine_processes, smtp
):
    config = monitor_config(zk_hosts, email=_email(smtp), alerts={"grace": 0.5})
    _, rec = await start_monitor(config)
    doomed = await asyncio.to_thread(engine_processes, zk_hosts, "doomed")
    await eventually(lambda: rec.of("engine_joined", "doomed"))
    doomed.signal(signal.SIGKILL)
    await eventually(lambda: smtp.mailbox.messages, what="the e-mail")
    msg = smtp.mailbox.messages[0]
    assert "engine_lost" in msg["Subject"]
    assert "doomed" in msg["Subject"]
    assert msg["To"] == "ops@example.org"
    sent = email.utils.parsedate_to_datetime(msg["Date"])  # what mail servers and filters want
    assert sent.tzinfo is not None
    assert abs(sent.timestamp() - time.time()) < 600  # today's date, not a fixed one
    assert re.fullmatch(r"<[0-9a-f]{32}@netdisco-monitor>", msg["Message-ID"]), msg["Message-ID"]
    body = msg.get_payload(decode=True).decode()
    assert "engine:     doomed" in body
    assert "host:       127.0.0.1:8715" in body
    assert "status_url: http://127.0.0.1:8715/netdiscovery/engine#doomed" in body
    assert "spiders:    quotes (running)" in body
    assert "last seen:  20" in body
    assert "since:      20" in body


async def test_smtp_down_then_up_the_alert_arrives(zk_hosts, start_monitor, engines, smtp_down):
    config = monitor_config(zk_hosts, email=_email(smtp_down))
    monitor, rec = await start_monitor(config)
    await _lose(engines, rec, "e1")
    await eventually(lambda: _value(monitor, "netdisco_monitor_alerts_failed_total", "email") >= 2)
    smtp_down.start()
    await eventually(lambda: smtp_down.mailbox.messages, what="the late e-mail")
    assert "e1" in smtp_down.mailbox.messages[0]["Subject"]
    # the server has the message before the client has its reply to QUIT: count after that
    await eventually(lambda: _value(monitor, "netdisco_monitor_alerts_sent_total", "email") >= 1)
    assert _value(monitor, "netdisco_monitor_alerts_sent_total", "email") == 1
    assert len(smtp_down.mailbox.messages) == 1


async def test_flap_inside_grace_sends_nothing(zk_hosts, start_monitor, engines, smtp):
    email = _email(smtp, events=["engine_lost", "cluster_empty"])  # both wait the grace
    config = monitor_config(zk_hosts, email=email, alerts={"grace": 1.5})
    monitor, rec = await start_monitor(config)
    engine = await asyncio.to_thread(engines, "flappy")
    await _lose(lambda _: engine, rec, "flappy")
    await eventually(lambda: rec.of("engine_lost", "flappy"))
    await asyncio.to_thread(engine.join)
    flapped = await eventually(lambda: rec.of("engine_flapped", "flappy"))
    # nothing left that could still send: no grace timer running (cancelled by the join,
    # not merely forgotten), no batch waiting, no delivery going (no wait past the grace)
    await eventually(lambda: _settled(monitor.alerts), "the alerts settled", timeout=20)
    assert smtp.mailbox.messages == []
    assert len(flapped) == 1
    assert _value(monitor, "netdisco_monitor_alerts_sent_total", "email") == 0


async def test_events_in_one_window_make_one_email(zk_hosts, start_monitor, engines, smtp):
    email = _email(smtp, events=["engine_lost", "cluster_empty"])
    config = monitor_config(zk_hosts, email=email, alerts={"batch_window": 0.8})
    monitor, rec = await start_monitor(config)
    pair = [await asyncio.to_thread(engines, name) for name in ("x1", "x2")]
    for engine in pair:
        await asyncio.to_thread(engine.join)
    await eventually(lambda: len(rec.of("engine_joined")) == 2)
    for engine in pair:
        await asyncio.to_thread(engine.vanish)
    await eventually(lambda: smtp.mailbox.messages)
    await eventually(lambda: rec.of("cluster_empty"))
    # a wrongly split second message would still be batched or being sent
    await eventually(lambda: _settled(monitor.alerts), "the alerts settled", timeout=20)
    assert len(smtp.mailbox.messages) == 1
    msg = smtp.mailbox.messages[0]
    assert msg["Subject"].startswith("[netdisco] 3 events")
    body = msg.get_payload(decode=True).decode()
    assert "engine:     x1" in body
    assert "engine:     x2" in body


async def test_alert_past_max_age_is_dropped_and_counted(
    zk_hosts, start_monitor, engines, smtp_down
):
    config = monitor_config(zk_hosts, email=_email(smtp_down), alerts={"max_age": 0.6})
    monitor, rec = await start_monitor(config)
    with capture_logs() as logs:
        await _lose(engines, rec, "gone")
        await eventually(lambda: _value(monitor, "netdisco_monitor_alerts_dropped_total", "email"))
    dropped = [x for x in logs if x["event"] == "alert_dropped"]
    assert len(dropped) == 1
    assert dropped[0]["events"] == ["engine_lost:gone"]


async def test_webhook_retried_until_accepted(zk_hosts, start_monitor, engines, unused_tcp_port):
    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=500 if len(received) == 1 else 204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}/hook"
        monitor, rec = await start_monitor(monitor_config(zk_hosts, webhook={"url": url}))
        await _lose(engines, rec, "w1")
        await eventually(lambda: _value(monitor, "netdisco_monitor_alerts_sent_total", "webhook"))
        assert len(received) == 2
        assert received[1]["type"] == "engine_lost"
        assert received[1]["engine"]["id"] == "w1"
        assert _value(monitor, "netdisco_monitor_alerts_failed_total", "webhook") == 1
    finally:
        await runner.cleanup()


async def test_command_gets_event_json_on_stdin(zk_hosts, start_monitor, engines, tmp_path: Path):
    out = tmp_path / "event.json"
    script = f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"
    command = {"argv": [sys.executable, "-c", script], "events": ["engine_joined"]}
    await start_monitor(monitor_config(zk_hosts, command=command))
    engine = await asyncio.to_thread(engines, "c1")
    await asyncio.to_thread(engine.join)
    await eventually(lambda: out.exists() and out.read_text())
    event = json.loads(out.read_text())
    assert event["type"] == "engine_joined"
    assert event["engine_id"] == "c1"


@pytest.mark.parametrize("target", ["tests.monitor.hook_targets:sync_hook",
                                    "tests.monitor.hook_targets.async_hook"])  # fmt: skip
async def test_callable_by_dotted_path(zk_hosts, start_monitor, engines, target: str):
    hook_targets.RECEIVED.clear()
    config = monitor_config(zk_hosts, callable={"target": target, "events": ["engine_joined"]})
    await start_monitor(config)
    engine = await asyncio.to_thread(engines, "py1")
    await asyncio.to_thread(engine.join)
    got = await eventually(lambda: hook_targets.RECEIVED)
    assert got[0][1:] == ("engine_joined", "py1")


def test_unloadable_callable_fails_at_start(zk_hosts):
    from monitor.daemon import Monitor

    for target in ("tests.monitor.hook_targets:missing", "tests.monitor.hook_targets:NOT_CALLABLE"):
        with pytest.raises(ConfigError) as info:
            Monitor(monitor_config(zk_hosts, callable={"target": target}))
        assert info.value.key == "callable.target"


async def test_a_hung_hook_blocks_neither_watcher_nor_email(zk_hosts, start_monitor, engines, smtp):
    config = monitor_config(
        zk_hosts,
        email=_email(smtp),
        callable={"target": "tests.monitor.hook_targets:never_returns"},
        alerts={"hook_timeout": 0.5},
    )
    monitor, rec = await start_monitor(config)
    await _lose(engines, rec, "h1")
    await eventually(lambda: smtp.mailbox.messages)
    await _lose(engines, rec, "h2")  # the watcher still reports while the hook hangs
    await eventually(lambda: rec.of("engine_lost", "h2"))
    await eventually(lambda: _value(monitor, "netdisco_monitor_alerts_failed_total", "callable"))


class _Recording:
    name, batch = "rec", False
    events = frozenset({EventType.ENGINE_LOST})

    def __init__(self) -> None:
        self.got: list[Event] = []

    async def deliver(self, events: Any) -> None:
        self.got.extend(events)

    async def aclose(self) -> None:
        return None


async def test_no_offline_alert_while_the_view_is_stale():
    """Pure routing logic: the grace timer waits for a fresh view, then looks again."""
    hook, fresh, present = _Recording(), asyncio.Event(), set[str]()
    settings = AlertSettings(grace=0.05, batch_window=0.0)
    alerts = Alerts([hook], settings, Metrics(), fresh=fresh, present=present.__contains__,
                    record=lambda e: None)  # fmt: skip
    alerts.submit(Event(type=EventType.ENGINE_LOST, engine_id="a"))
    alerts.submit(Event(type=EventType.ENGINE_LOST, engine_id="b"))
    alerts.submit(Event(type=EventType.ENGINE_LOST, engine_id="a"))  # the same absence
    # both grace periods are over and both timers wait for a fresh view
    await eventually(lambda: len(fresh._waiters) == 2, "the timers waiting", timeout=20)
    assert hook.got == []  # stale: nothing yet
    present.add("b")  # b came back while we could not see
    fresh.set()
    # both timers looked again (each decides at once: sends, or drops), then what they
    # sent was delivered (close waits for deliveries in flight)
    await eventually(lambda: not alerts.view()["waiting"], "both decided", timeout=20)
    await alerts.close()
    assert [e.engine_id for e in hook.got] == ["a"]


def _settled(alerts: Alerts) -> bool:
    """Whether no alert can go out any more: none waits out its grace (``view``), and no
    task of the alerts is left (a grace timer, a batch window, a delivery or its retry)."""
    pending = [t for t in asyncio.all_tasks() if not t.done() and _of_alerts(t)]
    return not alerts.view()["waiting"] and not pending


def _of_alerts(task: asyncio.Task[Any]) -> bool:
    name = getattr(task.get_coro(), "__qualname__", "")
    return isinstance(name, str) and name.startswith("Alerts.")


def _storm_alerts(hook: Any, **settings: Any) -> Alerts:
    fresh = asyncio.Event()
    fresh.set()
    return Alerts([hook], AlertSettings(grace=0.0, **settings), Metrics(), fresh=fresh,
                  present=lambda _: False, record=lambda e: None)  # fmt: skip


async def test_a_storm_reaches_a_webhook_as_a_few_posts(unused_tcp_port):
    """Thirty engines lost in one window: the first five posted one by one, the other
    twenty-five as one alert_storm event naming them; the next window starts afresh."""
    from monitor.hooks import WebhookHook
    from monitor.settings import WebhookSettings

    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    webhook = WebhookHook(WebhookSettings(url=f"http://127.0.0.1:{unused_tcp_port}/hook"))
    alerts = _storm_alerts(webhook, batch_window=0.5, storm_limit=5)
    try:
        for n in range(30):
            alerts.submit(Event(type=EventType.ENGINE_LOST, engine_id=f"e{n:02d}"))
        await eventually(lambda: len(received) == 6, "five posts and one storm")
        assert [r["engine_id"] for r in received[:5]] == ["e00", "e01", "e02", "e03", "e04"]
        folded = received[5]
        assert folded["type"] == "alert_storm"
        assert folded["detail"]["events"] == 25
        assert folded["detail"]["by_type"] == {"engine_lost": 25}
        assert folded["detail"]["engines"] == [f"e{n:02d}" for n in range(5, 30)]
        alerts.submit(Event(type=EventType.ENGINE_LOST, engine_id="late"))  # a new window
        await eventually(lambda: len(received) == 7, "the next event on its own")
        assert received[6]["engine_id"] == "late"
    finally:
        await alerts.close()
        await runner.cleanup()


async def test_a_storm_is_one_bounded_email(smtp):
    from monitor.hooks import MAX_DESCRIBED, EmailHook
    from monitor.settings import EmailSettings

    email = EmailHook(EmailSettings(**_email(smtp)))
    alerts = _storm_alerts(email, batch_window=0.3)
    for n in range(MAX_DESCRIBED + 70):
        alerts.submit(Event(type=EventType.ENGINE_LOST, engine_id=f"m{n}"))
    await eventually(lambda: smtp.mailbox.messages, "the e-mail")
    await alerts.close()
    (msg,) = smtp.mailbox.messages
    body = msg.get_payload(decode=True).decode()
    assert body.count("engine_lost at") == MAX_DESCRIBED
    assert "... and 70 more events: 70 engine_lost" in body


def test_a_retried_email_keeps_its_message_id() -> None:
    """Built again for a retry, a message keeps its Message-ID (one message to a server
    that took the first try); other events make another."""
    from monitor.hooks import EmailHook
    from monitor.settings import EmailSettings

    settings: dict[str, Any] = {**EMAIL, "port": 25}
    hook = EmailHook(EmailSettings(**settings))
    lost = [Event(type=EventType.ENGINE_LOST, engine_id="e1", identity=("engine_lost", "e1", "7"))]
    first, again = hook.message(lost), hook.message(lost)
    assert first["Message-ID"] == again["Message-ID"]
    two = ("engine_lost", "e2", "9")
    other = hook.message([Event(type=EventType.ENGINE_LOST, engine_id="e2", identity=two)])
    assert other["Message-ID"] != first["Message-ID"]
    assert email.utils.parsedate_to_datetime(first["Date"]).tzinfo is not None
