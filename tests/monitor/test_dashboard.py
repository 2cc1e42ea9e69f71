"""The dashboard's Spiders and Engines pages in headless Chromium, steering a real engine
through the monitor.

The screenshot in docs/monitor.md (docs/dashboard.png) is taken by this test: run it with
``NETDISCO_SCREENSHOT=docs/dashboard.png`` to refresh that file; otherwise the picture
goes to the test's temporary directory, so a test run never changes the checkout.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from netdisco.testing import eventually, free_port
from tests.monitor.service_support import MONITOR_TOKEN, real_engine, steering
from tests.monitor.test_http import CHROMIUM, Page, chromium

ROW = "table[data-engine='{engine}'] tr[data-spider='{spider}']"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),  # Chromium's first start on a loaded machine
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="/usr/bin/chromium absent (make test installs it)"
    ),
]


async def devtools(page: Page, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """One DevTools call on the page's websocket; its result."""
    msg_id = next(page.ids)
    await page.ws.send_json({"id": msg_id, "method": method, "params": params})
    while True:
        reply = await page.ws.receive_json()
        if reply.get("id") == msg_id:
            return dict(reply["result"])


async def shows(page: Page, expression: str, what: str) -> Any:
    """Wait until ``expression`` is truthy in the page; its value."""

    async def check() -> Any:
        try:
            return await page.eval(expression)
        except KeyError:  # no result: the page was navigating to another one
            return None

    return await eventually(check, what=what)


def row(engine: str, spider: str, css: str = "") -> str:
    selector = ROW.format(engine=engine, spider=spider) + (f" {css}" if css else "")
    return f"document.querySelector({json.dumps(selector)})"


def shots(tmp_path: Path) -> Path:
    """Where the README's screenshots go: ``NETDISCO_SCREENSHOTS=docs/images`` refreshes
    them; otherwise the test's temporary directory, so a test run never changes the checkout."""
    return Path(os.environ.get("NETDISCO_SCREENSHOTS") or tmp_path)


async def screenshot(page: Page, path: Path) -> None:
    """The whole page at 1280 px wide, as a PNG."""
    height = await page.eval("document.documentElement.scrollHeight")
    metrics = {"width": 1280, "height": int(height), "deviceScaleFactor": 1, "mobile": False}
    await devtools(page, "Emulation.setDeviceMetricsOverride", metrics)
    shot = await devtools(page, "Page.captureScreenshot", {"format": "png"})
    await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))


async def test_a_click_pauses_a_spider_on_a_real_engine(
    zk_hosts: str, start_monitor: Any, engines: Any, site: str, tmp_path: Path
) -> None:
    shot = Path(os.environ.get("NETDISCO_SCREENSHOT") or tmp_path / "dashboard.png")
    engine = await real_engine(zk_hosts, site)
    try:
        monitor, _ = await start_monitor(steering(zk_hosts))
        gone = await asyncio.to_thread(engines, "crawler-gone")
        dead_port = free_port()
        dead = f"http://127.0.0.1:{dead_port}/netdiscovery/engine"
        await asyncio.to_thread(gone.join, status_url=dead, port=dead_port)
        empty = await asyncio.to_thread(engines, "crawler-empty")
        await asyncio.to_thread(empty.join, status_url=dead, port=dead_port, spiders=[])
        spiders = f"{monitor.http.url}/spiders?interval=300"
        async with chromium(spiders, tmp_path / "profile") as page:
            state = row("crawler-1", "slowtree", ".state")
            await shows(page, f"{state}?.textContent === 'running'", "the running spider")
            chart = row("crawler-1", "slowtree", "svg.chart")
            await shows(page, f"Number({chart}?.dataset.samples) >= 5", "five samples in the chart")
            points = await page.eval(f"{chart}.querySelector('polyline').getAttribute('points')")
            assert len(points.split()) >= 5
            # one figure of pages/s: the column says what the legend says, read together
            both = f"[{row('crawler-1', 'slowtree', '.rate')}.textContent, " \
                   f"{row('crawler-1', 'slowtree', '.legend .pages')}.textContent]"  # fmt: skip
            rate, legend = await page.eval(both)
            assert legend == f"pages/s {rate}", (rate, legend)
            nothing = "document.querySelector(\"table[data-engine='crawler-empty'] tbody\")"
            assert "no spiders" in await shows(page, f"{nothing}?.textContent", "no spiders said")
            await _charts_have_axes_three_series_and_a_span(page)
            assert "hourly" in await page.eval("document.getElementById('next-runs').textContent")
            await _the_engines_page(page, engines)
            await page.eval(f"location.href = {json.dumps(spiders)}")
            back = f"{row('crawler-1', 'slowtree', '.state')}?.textContent === 'running'"
            await shows(page, back, "back on the Spiders page")
            assert await page.eval(f"{row('crawler-1', 'hourly', '.rate')}.textContent") == "-"

            token = "document.getElementById('token')"
            await page.eval(f"{token}.value = {json.dumps(MONITOR_TOKEN)}; "
                            f"{token}.dispatchEvent(new Event('change'))")  # fmt: skip
            await page.eval(f"{row('crawler-1', 'slowtree', 'button[data-action=pause]')}.click()")
            await eventually(lambda: engine.crawler("slowtree").state == "paused", what="paused")
            await shows(page, f"{row('crawler-1', 'slowtree', '.state')}.textContent === 'paused'",
                        "the page shows it paused")  # fmt: skip
            message = "document.getElementById('control-msg').textContent"
            assert await page.eval(message) == "crawler-1/slowtree pause: now paused"
            await shows(page, f"{row('crawler-1', 'slowtree', '.rate')}.textContent === '-'",
                        "no rate once paused")  # fmt: skip
            paused = f"{row('crawler-1', 'slowtree', '.legend .pages')}.textContent"
            assert await page.eval(paused) == "pages/s -"  # not the rate it had running
            await screenshot(page, shot)

            await _a_gone_engine_is_a_clear_error(page)
            await page.eval(f"location.href = {json.dumps(monitor.http.url + '/?interval=300')}")
            await _filters_narrow_the_event_log(
                page, await asyncio.to_thread(engines, "crawler-brief")
            )
    finally:
        await engine.stop(deadline=1)
    assert (await asyncio.to_thread(shot.read_bytes)).startswith(b"\x89PNG")


async def _the_engines_page(page: Page, engines: Any) -> None:
    """Node facts and a stalled engine, on the Engines page (reached by its link)."""
    await page.eval("document.querySelector('nav a[href^=\"/?\"]').click()")
    node = "document.querySelector(\"#engines tr[data-engine='crawler-1'] td.node\")"
    facts = await shows(page, f"{node}?.textContent.includes('rss') && {node}.textContent",
                        "the engine's node facts")  # fmt: skip
    assert re.search(r"rss \d+(\.\d)? MB", facts), facts
    assert re.search(r"fds \d+", facts), facts
    stuck = await asyncio.to_thread(engines, "crawler-stuck")
    await asyncio.to_thread(stuck.join, stalled=True, loop_lag=2.5)
    said = "document.querySelector(\"#engines tr[data-engine='crawler-stuck'] td.stalled\")"
    assert await shows(page, f"{said}?.textContent", "the stalled engine") == (
        "stalled (loop 2.5 s late)"
    )
    explained = await page.eval(f"{said}.querySelector('abbr').title")
    assert "event loop did not run" in explained
    since = await page.eval(f"{said}.parentElement.lastElementChild.textContent")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", since), since


async def _charts_have_axes_three_series_and_a_span(page: Page) -> None:
    chart = row("crawler-1", "slowtree", "svg.chart")
    texts = "[...{0}.querySelectorAll('.axis.{1} text')].map(t => t.textContent)"
    times = await page.eval(texts.format(chart, "x"))
    assert len(times) >= 3, times
    assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", t) for t in times), times
    rates = await page.eval(texts.format(chart, "y"))
    assert rates[0] == "0/s", rates
    assert all(r.endswith("/s") for r in rates), rates
    for name in ("pages", "items", "errors"):
        await shows(page, f"!!{chart}.querySelector('polyline.{name}')", f"the {name}/s line")
    legend = await page.eval(f"{row('crawler-1', 'slowtree', '.legend')}.textContent")
    assert all(word in legend for word in ("pages/s", "items/s", "errors/s")), legend
    whole = "document.querySelector(\".engine-chart[data-engine='crawler-1'] svg.chart\")"
    await shows(page, f"!!{whole}?.querySelector('polyline.pages')", "the engine's chart")
    assert await page.eval(f"{chart}.dataset.span") == "600"
    await page.eval(_choose("span", "1h"))
    await shows(page, f"{row('crawler-1', 'slowtree', 'svg.chart')}?.dataset.span === '3600'",
                "the chart over an hour")  # fmt: skip
    # a crawl of seconds fills its chart: the axis spans its data, not the hour chosen
    shown = await page.eval(f"Number({row('crawler-1', 'slowtree', 'svg.chart')}.dataset.shown)")
    assert 10 <= shown < 600, shown
    hour = await page.eval(texts.format(row("crawler-1", "slowtree", "svg.chart"), "x"))
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in hour), hour  # to the second
    await page.eval(_choose("span", "10m"))
    await shows(page, f"{row('crawler-1', 'slowtree', 'svg.chart')}?.dataset.span === '600'",
                "back to 10 minutes")  # fmt: skip


async def _a_gone_engine_is_a_clear_error(page: Page) -> None:
    await page.eval(f"{row('crawler-gone', 'quotes', 'button[data-action=stop]')}.click()")
    error = await shows(page, "document.querySelector('#control-msg.error')?.textContent",
                        "the error of a gone engine")  # fmt: skip
    assert error.startswith("crawler-gone/quotes stop failed (502): engine 'crawler-gone'")
    assert "cannot be reached" in error


def _choose(select: str, value: str) -> str:
    element = f"document.getElementById({json.dumps(select)})"
    return f"{element}.value = {json.dumps(value)}; {element}.dispatchEvent(new Event('change'))"


async def _filters_narrow_the_event_log(page: Page, brief: Any) -> None:
    events = (
        "[...document.querySelectorAll('#events li')].map(li => li.textContent.split(' UTC ')[1])"
    )
    await asyncio.to_thread(brief.join)
    await shows(page, f"{events}.includes('engine_joined crawler-brief')", "the brief join")
    await asyncio.to_thread(brief.leave)  # through the registry's own leave transaction
    gone = "l => l === 'engine_left crawler-brief'"
    last = await shows(page, f"{events}.find({gone})", "the brief engine's departure in the log")
    await page.eval(_choose("event-engine", "crawler-gone"))
    assert await page.eval(events) == ["engine_joined crawler-gone"]
    await page.eval(_choose("event-engine", ""))
    await page.eval(_choose("event-type", last.split()[0]))
    assert await page.eval(events) == [last]
