"""Several monitors on one cluster: one alert per event, none lost when a monitor dies.

Real ``netdisco-monitor`` processes, a real ZooKeeper, a real SMTP server, a webhook
receiver, a command and a callable (docs/monitor.md, "Several monitors").
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp

from netdisco.testing import eventually
from tests.monitor.conftest import REPO, Smtp
from tests.monitor.monitor_processes import TOML, MonitorProcess, Webhook

HOOKS = ("email", "webhook", "command", "callable")


class Scene:
    """The receivers of every hook kind, and the monitors' configuration."""

    def __init__(self, zk_hosts: str, tmp_path: Path, smtp: Smtp, webhook_url: str) -> None:
        self.commands = tmp_path / "commands.jsonl"
        self.calls = tmp_path / "calls.jsonl"
        self.smtp = smtp
        self.config = TOML.format(
            hosts=zk_hosts, session=2.0, port="{port}", grace=0.0, smtp=smtp.port,
            webhook=webhook_url, commands=self.commands,
        )  # fmt: skip
        self.env = {"TEST_HOOK_FILE": str(self.calls)}
        self.tmp_path = tmp_path

    async def monitor(self) -> MonitorProcess:
        return await MonitorProcess.start(self.config, self.tmp_path, self.env)

    def lines(self, path: Path) -> list[dict[str, Any]]:
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def received(self, webhook: Webhook) -> dict[str, list[str]]:
        """Per hook, the engine of each engine_lost alert received (duplicates kept)."""
        mails = [str(m["Subject"]).split(": ", 1)[-1] for m in self.smtp.mailbox.messages]
        return {
            "email": mails,
            "webhook": [e["engine_id"] for e in webhook.received],
            "command": [e["engine_id"] for e in self.lines(self.commands)],
            "callable": [e["engine_id"] for e in self.lines(self.calls)],
        }


async def _monitor_view(monitor: MonitorProcess) -> dict[str, Any]:
    url = f"{monitor.url}/netdiscovery/monitor"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        body: dict[str, Any] = await resp.json()
    return body["monitors"]


async def _check(monitor: MonitorProcess) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "monitor.cli", "check", "--url", monitor.url, cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return out.decode()


def _recorded(monitors: list[MonitorProcess], engine: str) -> int:
    """How many of the monitors' records of an alert about ``engine`` were made or found."""
    said = ("alert_recorded", "alert_recorded_already")
    return sum(1 for m in monitors for x in m.logs
               if x["event"] in said and x.get("engine_id") == engine)  # fmt: skip


async def test_two_monitors_started_together_send_one_alert_per_loss(
    zk_hosts, tmp_path, smtp, engine_processes
):
    webhook = Webhook()
    scene = Scene(zk_hosts, tmp_path, smtp, await webhook.start())
    pair = list(await asyncio.gather(scene.monitor(), scene.monitor()))
    try:
        await eventually(lambda: all(m.named("baseline") for m in pair), what="both listed")
        await eventually(lambda: sum(m.leading() for m in pair) == 1, what="one leads")

        async def both_see_both() -> list[dict[str, Any]] | None:
            views = [await _monitor_view(m) for m in pair]
            return views if all(len(v["monitors"]) == 2 for v in views) else None

        views = await eventually(both_see_both, what="each lists both monitors")
        assert views[0]["leader"]["instance"] == views[1]["leader"]["instance"]
        assert sorted(v["delivering"] for v in views) == [False, True]
        leader = pair[0] if views[0]["delivering"] else pair[1]
        assert views[0]["leader"]["url"] == leader.url
        assert "2 monitors running" in await _check(pair[0])

        doomed = [await asyncio.to_thread(engine_processes, zk_hosts, n) for n in ("e1", "e2")]
        calm = await asyncio.to_thread(engine_processes, zk_hosts, "calm")
        joined = lambda: all(len(m.named("engine_joined")) == 3 for m in pair)  # noqa: E731
        await eventually(joined, what="three joins seen by both")
        for engine in doomed:
            engine.signal(signal.SIGKILL)
        calm.signal(signal.SIGTERM)
        # every monitor records every alert (4 hooks): once made, once found made
        for name in ("e1", "e2"):
            await eventually(lambda n=name: _recorded(pair, n) == 2 * len(HOOKS), what=name)
        sent = lambda: sum(len(x["entries"]) for x in leader.named("alert_sent"))  # noqa: E731
        await eventually(lambda: sent() == 2 * len(HOOKS), what="eight alerts sent")
        await eventually(lambda: all(m.named("engine_left") for m in pair), what="the leave")
        received = scene.received(webhook)
        for hook in HOOKS:
            assert sorted(received[hook]) == ["e1", "e2"], (hook, received)
        ids = [m["Message-ID"] for m in smtp.mailbox.messages]
        assert len(set(ids)) == 2
        assert all(m["Date"] for m in smtp.mailbox.messages)
        assert {e["id"] for e in webhook.received} == {i.strip("<>").split("@")[0] for i in ids}
        follower = pair[1] if leader is pair[0] else pair[0]
        assert not follower.named("alert_sent")
    finally:
        await asyncio.gather(*(m.stop() for m in pair))
        await webhook.close()
