"""Several monitors on one cluster: one alert per event, none lost when a monitor dies.

Real ``netdisco-monitor`` processes, a real ZooKeeper, a real SMTP server, a webhook
receiver, a command and a callable (docs/monitor.md, "Several monitors").
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kazoo.client import KazooClient

from netdisco.cluster.jobs import Job, JobState, new_id
from netdisco.testing import eventually, free_port
from tests.monitor.conftest import REPO, Smtp, monitor_config
from tests.monitor.fake_engines import FakeEngine
from tests.monitor.hook_targets import RECEIVED
from tests.monitor.monitor_processes import (
    TOML,
    HeldMailbox,
    MonitorProcess,
    Webhook,
    logged_at,
)

HOOKS = ("email", "webhook", "command", "callable")


class Scene:
    """The receivers of every hook kind, and the monitors' configuration."""

    def __init__(
        self, zk_hosts: str, tmp_path: Path, smtp: Smtp, webhook_url: str, grace: float = 0.0
    ) -> None:
        self.commands = tmp_path / "commands.jsonl"
        self.calls = tmp_path / "calls.jsonl"
        self.smtp = smtp
        self.config = TOML.format(
            hosts=zk_hosts, session=2.0, port="{port}", grace=grace, smtp=smtp.port,
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
    monitors: dict[str, Any] = body["monitors"]
    return monitors


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

        started = [asyncio.to_thread(engine_processes, zk_hosts, n) for n in ("e1", "e2", "calm")]
        *doomed, calm = await asyncio.gather(*started)
        joined = lambda: all(len(m.named("engine_joined")) == 3 for m in pair)  # noqa: E731
        await eventually(joined, what="three joins seen by both")
        for engine in doomed:
            engine.signal(signal.SIGKILL)
        calm.signal(signal.SIGTERM)
        # every monitor records every alert (4 hooks): once made, once found made
        recorded = lambda: all(_recorded(pair, n) == 2 * len(HOOKS) for n in ("e1", "e2"))  # noqa: E731
        await eventually(recorded, what="both alerts recorded by both monitors")

        def sent() -> bool:
            return sum(len(x["entries"]) for x in leader.named("alert_sent")) == 2 * len(HOOKS)

        await eventually(sent, what="eight alerts sent")
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
        # a leader that stops leaves the latch: the other leads at once, not after a session
        stopped = time.time()
        await leader.stop()
        await eventually(follower.leading, what="the other monitor leads")
        took = logged_at(follower.named("alerts_leader")[-1]) - stopped
        assert took < SESSION, took
    finally:
        await asyncio.gather(*(m.stop() for m in pair))
        await webhook.close()


SESSION = 2.0


def _dump(monitors: list[MonitorProcess], path: Path) -> None:
    """Every monitor's log, one after the other, to read when the test fails."""
    with path.open("w") as out:
        for monitor in monitors:
            out.write(f"== {monitor.url}\n")
            out.writelines(json.dumps(x) + "\n" for x in monitor.logs)


def _outbox_states(zk_hosts: str, engine: str) -> dict[str, str]:
    """The outbox entries' states (by hook) of the alerts about ``engine``, read directly."""
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        out: dict[str, str] = {}
        if client.exists("/netdiscovery.outbox") is None:
            return out
        for name in client.get_children("/netdiscovery.outbox"):
            raw, _ = client.get(f"/netdiscovery.outbox/{name}")
            data = json.loads(raw)
            if engine in json.dumps(data.get("identity")):
                out[name.split(".")[0]] = data["state"]
        return out
    finally:
        client.stop()
        client.close()


def _alerted(
    scene: Scene, webhook: Webhook, name: str, how: Callable[[Iterable[bool]], bool]
) -> bool:
    """``name``'s loss reached any (or all) of the hooks."""
    return how(name in alerted for alerted in scene.received(webhook).values())


def _said(monitor: MonitorProcess, event: str, engine: str) -> bool:
    return any(x.get("engine_id") == engine for x in monitor.named(event))


class Trio:
    """Three monitors, each one killed is replaced; the kills and the leaders, recorded."""

    def __init__(self, scene: Scene) -> None:
        self.scene = scene
        self.running: list[MonitorProcess] = []
        self.dead: list[MonitorProcess] = []
        self.kills: list[float] = []
        self.failovers: list[float] = []  # seconds from a kill to the next leader's word

    def all(self) -> list[MonitorProcess]:
        return self.running + self.dead

    async def fill(self) -> None:
        fresh = await asyncio.gather(*(self.scene.monitor() for _ in range(3 - len(self.running))))
        self.running += fresh
        await eventually(lambda: all(m.named("baseline") for m in fresh), what="listed")

    async def leader(self) -> MonitorProcess:
        def leading() -> list[MonitorProcess]:
            found = [m for m in self.running if m.leading()]
            return found if len(found) == 1 else []

        found: list[MonitorProcess] = await eventually(leading, what="one leader")
        return found[0]

    async def kill_leader(self) -> float:
        """``kill -9`` the leader; then: another leads within the session timeout + 1 s,
        by the times the monitors logged (not by a clock here)."""
        leader = await self.leader()
        at = leader.kill()
        self.running.remove(leader)
        self.dead.append(leader)
        self.kills.append(at)
        took = await eventually(lambda: [logged_at(x) for m in self.running
                                         for x in m.named("alerts_leader")
                                         if logged_at(x) > at], what="a new leader")  # fmt: skip
        self.failovers.append(round(min(took) - at, 3))
        assert min(took) - at <= SESSION + 1.0, (min(took) - at, "the failover")
        return at

    def sent_at(self, engine: str, hook: str) -> list[float]:
        """When alerts about ``engine`` were sent by ``hook``, by any monitor."""
        return [logged_at(x) for m in self.all() for x in m.named("alert_sent")
                if x["hook"] == hook and f"engine_lost:{engine}" in x["events"]]  # fmt: skip

    def taken_over(self, hook: str) -> int:
        return sum(1 for m in self.all() for x in m.named("alert_taken_over")
                   if x["entry"].startswith(f"{hook}."))  # fmt: skip


async def test_three_monitors_killed_around_deliveries_lose_no_alert(zk_hosts, tmp_path, engines):
    """Kills of the delivering monitor after a delivery was marked, before it was sent
    (within the grace period) and between its send and its mark (the SMTP server holds its
    answer): every loss is alerted by every hook, a duplicate only where a kill fell between
    a send and its mark (counted as taken over), failover within the session timeout + 1 s,
    no alert for a leave."""
    smtp = Smtp(free_port())
    smtp.mailbox = mailbox = HeldMailbox()
    smtp.start()
    webhook = Webhook()
    scene = Scene(zk_hosts, tmp_path, smtp, await webhook.start(), grace=0.5)
    trio = Trio(scene)
    lost: list[str] = []

    async def lose(name: str) -> None:
        engine = await asyncio.to_thread(engines, name)
        await asyncio.to_thread(engine.join)
        seen = lambda: all(_said(m, "engine_joined", name) for m in trio.running)  # noqa: E731
        await eventually(seen, what=f"{name} joined")
        await asyncio.to_thread(engine.vanish)
        lost.append(name)

    try:
        await trio.fill()
        # after: the alert is sent and marked, then its monitor dies: not sent again
        await lose("after")

        async def marked() -> bool:
            states = await asyncio.to_thread(_outbox_states, zk_hosts, "after")
            return len(states) == len(HOOKS) and set(states.values()) == {"sent"}

        await eventually(marked, what="the alerts about 'after' marked sent")
        await trio.kill_leader()
        await trio.fill()
        # before: the monitor that would send it dies within the grace period
        leader = await trio.leader()
        await lose("before")
        await eventually(lambda: _said(leader, "engine_lost", "before"), what="seen")
        killed = await trio.kill_leader()
        await eventually(lambda: trio.sent_at("before", "email"), what="sent by the next")
        assert min(trio.sent_at("before", "email")) - killed <= SESSION + 1.0
        await trio.fill()
        # a leave on the way: never alerted
        leaver = await asyncio.to_thread(engines, "leaver")
        await asyncio.to_thread(leaver.join)
        joined = lambda: all(_said(m, "engine_joined", "leaver") for m in trio.running)  # noqa: E731
        await eventually(joined, what="the leaver joined")
        await asyncio.to_thread(leaver.leave)
        # during: the message is at the SMTP server, its monitor dies before the answer
        mailbox.hold.set()
        await lose("during")
        await asyncio.to_thread(mailbox.held.wait, 30)
        killed = await trio.kill_leader()
        mailbox.go.set()
        await eventually(lambda: trio.sent_at("during", "email"), what="sent again")
        assert min(trio.sent_at("during", "email")) - killed <= SESSION + 1.0
        await trio.fill()
        for name in lost:
            everywhere = lambda n=name: all(n in got for got in scene.received(webhook).values())  # noqa: E731
            await eventually(everywhere, what=f"{name} alerted by every hook")
        await eventually(lambda: any(m.named("engine_left") for m in trio.all()), what="left")
        received = scene.received(webhook)
        for hook, engines_alerted in received.items():
            assert "leaver" not in engines_alerted, hook
            assert set(engines_alerted) == set(lost), (hook, received)
            duplicates = len(engines_alerted) - len(set(engines_alerted))
            assert duplicates <= trio.taken_over(hook), (hook, received)
        assert trio.taken_over("email") >= 1  # the held message was taken over
        assert len(trio.kills) == 3
        print(f"failovers {trio.failovers} s; taken over: {trio.taken_over('email')} e-mail")
    finally:
        mailbox.go.set()
        await asyncio.gather(*(m.stop() for m in trio.all()))
        _dump(trio.all(), tmp_path / "monitors.log")
        await webhook.close()
        smtp.stop()


async def test_two_monitors_call_a_hook_once_per_job_event(zk_hosts, start_monitor):
    """A job runs on an engine no monitor sees: both monitors list it started, both race
    to mark it lost (one compare-and-set wins) and both report that; the callable hook
    hears each change once."""
    RECEIVED.clear()
    hook = {"target": "tests.monitor.hook_targets:sync_hook",
            "events": ["job_started", "job_lost"]}  # fmt: skip
    config = monitor_config(zk_hosts, callable=hook, jobs={"poll": 0.2})
    pair = [await start_monitor(config) for _ in range(2)]
    await eventually(lambda: all(m.jobs._seen is not None for m, _ in pair), what="baselines")
    job = Job(id=new_id(), spider="s", engine="nowhere", incarnation="gone", attempts=1,
              state=JobState.RUNNING, created_at=time.time(), started_at=time.time())  # fmt: skip
    await pair[0][0].jobs.store.create(job)
    await eventually(lambda: all(rec.of("job_lost") for _, rec in pair), what="both lost it")
    await eventually(lambda: len(RECEIVED) >= 2, what="the calls")
    settled = lambda: all(not m.alerts.view()["sending"] and not m.alerts._puts  # noqa: E731
                          for m, _ in pair)  # fmt: skip
    await eventually(settled, what="every alert recorded, none being sent")
    (leader,) = [m for m, _ in pair if m.latch.leading]
    assert {e.state for e in leader.courier.known.values()} == {"sent"}
    assert sorted(kind for _, kind, _ in RECEIVED) == ["job_lost", "job_started"]
    assert len(leader.courier.known) == 2  # one entry each, though both monitors saw both


async def test_two_monitors_fold_a_storm_once(zk_hosts, start_monitor, engines):
    """Six engines lost at once, seen by two monitors: the webhook gets the first two one
    by one and the rest as one alert_storm, once (the leader folds; the other sends none)."""
    webhook = Webhook()
    url = await webhook.start()
    hook = {"url": url, "events": ["engine_lost"]}
    alerts = {"batch_window": 1.5, "storm_limit": 2}
    config = monitor_config(zk_hosts, webhook=hook, alerts=alerts)
    pair = [await start_monitor(config) for _ in range(2)]
    names = [f"s{n}" for n in range(6)]
    crowd = [await asyncio.to_thread(engines, name) for name in names]
    await asyncio.gather(*(asyncio.to_thread(e.join) for e in crowd))
    await eventually(lambda: all(len(r.of("engine_joined")) == 6 for _, r in pair), what="joins")
    await asyncio.gather(*(asyncio.to_thread(e.vanish) for e in crowd))
    await eventually(lambda: all(len(r.of("engine_lost")) == 6 for _, r in pair), what="lost")

    def storms() -> list[dict[str, Any]]:
        return [e for e in webhook.received if e["type"] == "alert_storm"]

    await eventually(storms, what="the storm posted")
    settled = lambda: all(not m.alerts.view()["sending"] and not m.alerts._puts  # noqa: E731
                          for m, _ in pair)  # fmt: skip
    await eventually(settled, what="every alert recorded, none being sent")
    await webhook.close()
    singles = [e["engine_id"] for e in webhook.received if e["type"] == "engine_lost"]
    (storm,) = storms()
    assert len(singles) == 2
    assert storm["detail"]["events"] == 4
    assert sorted(singles + storm["detail"]["engines"]) == names


#: the issue's goal at full size (100 losses, kills at random moments): set it to run
GOAL_LOSSES = int(os.environ.get("NETDISCO_FAILOVER_LOSSES", "0"))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not GOAL_LOSSES, reason="NETDISCO_FAILOVER_LOSSES=100 runs the goal")
async def test_the_goal_losses_with_monitors_killed_at_random(zk_hosts, tmp_path):
    """Three monitors, ``NETDISCO_FAILOVER_LOSSES`` engine losses and a few leaves, the
    sending monitor killed with SIGKILL (and replaced) at random moments around them:
    every loss alerted by every hook, duplicates no more than the alerts taken over, each
    failover within the session timeout + 1 s, no alert for a leave."""
    rng = random.Random(int(os.environ.get("NETDISCO_FAILOVER_SEED", "49")))
    smtp = Smtp(free_port())
    smtp.start()
    webhook = Webhook()
    scene = Scene(zk_hosts, tmp_path, smtp, await webhook.start(), grace=0.5)
    trio = Trio(scene)
    lost: list[str] = []
    leavers: list[str] = []
    try:
        await trio.fill()
        for n in range(GOAL_LOSSES):
            name = f"g{n}"
            engine = await asyncio.to_thread(FakeEngine, zk_hosts, "/netdiscovery", name)
            await asyncio.to_thread(engine.join)
            seen = lambda: all(_said(m, "engine_joined", name) for m in trio.running)  # noqa: E731,B023
            await eventually(seen, what=f"{name} joined")
            leaves = rng.random() < 0.1
            await asyncio.to_thread(engine.leave if leaves else engine.vanish)
            (leavers if leaves else lost).append(name)
            await asyncio.to_thread(engine.close)
            if rng.random() < 0.15:
                # the kill falls before the send, between the hooks' deliveries, or after
                moment = "before" if leaves else rng.choice(("before", "between", "after"))
                if moment != "before":
                    hooks = any if moment == "between" else all
                    got = partial(_alerted, scene, webhook, name, hooks)
                    await eventually(got, what=f"{name} alerted ({moment})")
                await trio.kill_leader()
                await trio.fill()
        for name in lost:
            everywhere = lambda n=name: all(n in got for got in scene.received(webhook).values())  # noqa: E731
            await eventually(everywhere, what=f"{name} alerted by every hook")
        received = scene.received(webhook)
        for hook, alerted in received.items():
            assert not set(alerted) & set(leavers), hook
            assert set(alerted) == set(lost), hook
            assert len(alerted) - len(set(alerted)) <= trio.taken_over(hook), (hook, received)
        duplicates = {h: len(a) - len(set(a)) for h, a in received.items()}
        taken = {h: trio.taken_over(h) for h in HOOKS}
        print(f"losses {len(lost)}, leaves {len(leavers)}, kills {len(trio.kills)}, "
              f"failovers {min(trio.failovers, default=0)}-{max(trio.failovers, default=0)} s, "
              f"duplicates {duplicates}, taken over {taken}")  # fmt: skip
    finally:
        await asyncio.gather(*(m.stop() for m in trio.all()))
        _dump(trio.all(), tmp_path / "monitors.log")
        await webhook.close()
        smtp.stop()
