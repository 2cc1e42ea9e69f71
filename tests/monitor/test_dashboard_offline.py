"""The dashboard keeps the dead, in headless Chromium: a lost engine stays listed offline
with its alert's fate, a left one too, and events say what changed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.monitor.conftest import Smtp, monitor_config
from tests.monitor.test_dashboard import screenshot, shots, shows
from tests.monitor.test_http import CHROMIUM, chromium

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent"),
]

SHOP = [{"name": "shop", "state": "running"}]


def offline(engine: str) -> str:
    selector = f"#engines tr[data-engine={json.dumps(engine)}][data-offline]"
    return f"document.querySelector({json.dumps(selector)})"


async def test_a_lost_engine_stays_listed_offline_with_its_alert(
    zk_hosts: str, start_monitor: Any, engines: Any, smtp: Smtp, tmp_path: Path
) -> None:
    email = {"sender": "m@example.org", "to": ["ops@example.org"], "port": smtp.port,
             "events": ["engine_lost"]}  # fmt: skip
    monitor, rec = await start_monitor(monitor_config(zk_hosts, email=email))
    calm, doomed, quitter = [
        await asyncio.to_thread(engines, n) for n in ("calm", "doomed", "quitter")
    ]
    for engine in (calm, doomed, quitter):
        await asyncio.to_thread(engine.join, spiders=SHOP)
    async with chromium(f"{monitor.http.url}/?interval=200", tmp_path / "profile") as page:
        count = "document.getElementById('count').textContent"
        await shows(page, f"{count} === '3 engines'", "three engines online")
        assert await page.eval("document.getElementById('changes-head').hidden")  # nothing yet
        await asyncio.to_thread(calm.update, spiders=[{"name": "shop", "state": "paused"}])
        await asyncio.to_thread(doomed.vanish)
        await asyncio.to_thread(quitter.leave)
        sent = f"{offline('doomed')}?.querySelector('.gone').textContent.includes('alert sent')"
        assert await shows(page, sent, "the lost engine, its alert sent")
        gone = await page.eval(f"{offline('doomed')}.querySelector('.gone').textContent")
        assert gone.startswith("lost (crashed or cut off) at ")
        assert "(email)" in gone
        assert await page.eval(f"{offline('doomed')}.className") == "offline"
        # its figures as a reading (pages and items, and when, if it was ever read)
        figures = await page.eval(f"{offline('doomed')}.textContent")
        assert "· its spiders never read" in figures, figures  # a fake: never read, not "0"
        said = f"{offline('quitter')}?.querySelector('.gone').textContent.startsWith('left')"
        assert await shows(page, said, "the engine that left, listed offline")
        left = await page.eval(f"{offline('quitter')}.querySelector('.gone').textContent")
        assert left.startswith("left at ")
        assert "no alert hook configured for it" in left
        assert "grace" not in left
        await shows(page, f"{count} === '1 engine'", "one engine online, in the singular")
        assert not await page.eval("document.getElementById('changes-head').hidden")
        events = "[...document.querySelectorAll('#events li')].map(li => li.textContent)"
        paused = "' spider_paused calm/shop running → paused'"
        await shows(page, f"{events}.some(t => t.endsWith({paused}))", "the pause, said as such")
        shown = "[...document.querySelectorAll('#events li')].map(li => li.dataset.type)"
        assert "engine_updated" not in await page.eval(shown)  # said as the pause it carries
        await screenshot(page, shots(tmp_path) / "dashboard-offline.png")
        await page.eval("document.querySelector('nav a[href^=\"/alerts\"]').click()")
        alerts = "document.querySelector('#alerts tr[data-result=sent]')?.textContent"
        said = await shows(page, alerts, "the delivery on the Alerts page")
        assert "engine_lost:doomed" in said
        assert "email" in said
        hooks = await page.eval("document.getElementById('hooks').textContent")
        assert "email (engine_lost)" in hooks
    assert len(smtp.mailbox.messages) == 1
    assert [e.type.value for e in rec.of("spider_paused")] == ["spider_paused"]
