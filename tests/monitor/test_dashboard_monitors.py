"""Two monitors on one cluster, in headless Chromium: each page says which one sends the
alerts and lists the other, and a lost engine's alert is left to the one that sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from netdisco.testing import eventually
from tests.monitor.conftest import Smtp, monitor_config
from tests.monitor.test_dashboard import shows
from tests.monitor.test_http import CHROMIUM, chromium

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent"),
]


async def test_each_monitor_says_which_one_sends_the_alerts(
    zk_hosts: str, start_monitor: Any, engines: Any, smtp: Smtp, tmp_path: Path
) -> None:
    email = {"sender": "m@example.org", "to": ["ops@example.org"], "port": smtp.port,
             "events": ["engine_lost"]}  # fmt: skip
    first, _ = await start_monitor(monitor_config(zk_hosts, email=email))
    await eventually(lambda: first.latch.leading, what="the first monitor leads")
    second, _ = await start_monitor(monitor_config(zk_hosts, email=email))
    await eventually(lambda: len(second.latch.monitors) == 2, what="the second in the latch")
    doomed = await asyncio.to_thread(engines, "doomed")
    await asyncio.to_thread(doomed.join)
    async with chromium(f"{second.http.url}/?interval=200", tmp_path / "profile") as page:
        line = "document.getElementById('monitors').textContent"
        said = f"alerts sent by {first.http.url}; 2 monitors running: "
        assert await shows(page, f"{line}.startsWith({json.dumps(said)})", "the leader named")
        text = await page.eval(line)
        assert f"{first.http.url} (sends)" in text
        assert f"{second.http.url} (this one)" in text
        await asyncio.to_thread(doomed.vanish)
        row = "document.querySelector('#engines tr[data-engine=\"doomed\"][data-offline] .gone')"
        left = f"{row}?.textContent.includes('alert left to the monitor that sends the alerts')"
        assert await shows(page, left, "the follower leaves the alert to the leader")
        await page.eval(f"location.href = {json.dumps(first.http.url + '/alerts?interval=200')}")
        said = "alerts sent by this monitor; 2 monitors running: "
        assert await shows(page, f"{line}.startsWith({json.dumps(said)})", "the leader says so")
    await eventually(lambda: first.alerts.deliveries, what="the leader's delivery")
    assert len(smtp.mailbox.messages) == 1
    assert not second.alerts.deliveries
