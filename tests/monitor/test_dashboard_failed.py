"""Failed requests on the dashboard, in headless Chromium: aggregated per spider from a
real engine, and a retry button that re-queues them there through the monitor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from tests.monitor.service_support import ENGINE_TOKEN, MONITOR_TOKEN, SLOW, steering
from tests.monitor.test_dashboard import screenshot, shots, shows
from tests.monitor.test_http import CHROMIUM, chromium
from tests.netdisco.engine_site import SiteSpider

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent"),
]


async def test_a_retry_button_requeues_failed_requests_at_the_engine(
    zk_hosts: str, start_monitor: Any, site: str, tmp_path: Path
) -> None:
    engine = SpiderEngine(EngineSettings(id="crawler-f", port=0, token=ENGINE_TOKEN),
                          zookeeper={"hosts": zk_hosts, "session_timeout": 4.0})  # fmt: skip
    missing = f"{site}/slow/p/999"  # a 404: failed, not retried
    engine.add_spider(SiteSpider(name="shop", start_urls=[missing, f"{site}/slow/p/0"]), SLOW)
    await engine.start()
    try:
        monitor, _ = await start_monitor(steering(zk_hosts))
        url = f"{monitor.http.url}/spiders?interval=300"
        async with chromium(url, tmp_path / "profile") as page:
            css = '#failed tr[data-engine="crawler-f"][data-spider="shop"]'
            row = f"document.querySelector({json.dumps(css)})"
            await shows(page, f"{row}?.querySelector('.total').textContent === '1'", "one failed")
            text = await page.eval(f"{row}.textContent")
            assert missing in text
            await screenshot(page, shots(tmp_path) / "dashboard-failed.png")
            token = "document.getElementById('token')"
            await page.eval(f"{token}.value = {json.dumps(MONITOR_TOKEN)}")
            await page.eval(f"{row}.querySelector('button[data-retry]').click()")
            message = "document.getElementById('control-msg').textContent"
            assert await shows(
                page, f"{message} === 'crawler-f/shop retry: requeued 1'", "requeued"
            )
            failures = engine.crawler("shop").failures  # taken out of the store, queued again
            assert failures.kept == 0 or sum(failures.by_reason.values()) >= 2
    finally:
        await engine.stop(deadline=1)
