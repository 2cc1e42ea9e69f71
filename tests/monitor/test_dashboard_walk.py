"""The dashboard walked as a person uses it, in Debian's Chromium through Playwright, on a
real ZooKeeper, a real monitor and a real ``netdisco engine`` process with job slots:
deploy a project, pick its spider by name and start it, follow its log, page through its
items and download them, cancel and re-run it, and see a lost engine kept offline and a
stalled one said stalled.

The README's screenshots are taken here: ``NETDISCO_SCREENSHOTS=docs/images`` refreshes
them; otherwise they go to the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from netdisco.crawl.render.pool import CHROMIUM_FLAGS
from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config
from tests.monitor.test_dashboard import shots
from tests.monitor.test_http import CHROMIUM
from tests.monitor.test_job_names import cli
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    TOKEN,
    Client,
    spawn_engine,
    state_of,
    with_token,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),  # Chromium's first start and a project's venv on a loaded machine
    pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent"),
]

SPIDER = """from netdisco import Request, Spider


class Titles(Spider):
    name = "titles"
    site = ""

    async def start(self):
        yield Request(f"{self.site}/slow/p/0", callback=self.parse)

    def parse(self, response):
        yield {"url": response.url, "title": response.css("h1::text").get()}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)
"""


def project(directory: Path) -> Path:
    (directory / "shop_spiders.py").parent.mkdir(parents=True)
    (directory / "shop_spiders.py").write_text(SPIDER)
    (directory / "pyproject.toml").write_text('[project]\nname = "shop"\nversion = "1"\n')
    return directory


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        launched = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=list(CHROMIUM_FLAGS), headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


async def test_a_person_deploys_starts_follows_pages_downloads_cancels_and_reruns(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,
    engines,
    browser,
    tmp_path,
):
    from playwright.async_api import expect

    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    url = monitor.http.url
    code, _, err = await cli(url, "deploy", str(project(tmp_path / "shop")), "--version", "1.0")
    assert code == 0, err
    await spawn_engine("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    page = await browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # the projects page lists the version and its spider by name
    await page.goto(f"{url}/projects?interval=300")
    version = page.locator("table[data-project=shop] tr[data-default]")
    await expect(version).to_contain_text("1.0")
    await expect(version).to_contain_text("titles")
    await expect(version).to_contain_text("UTC")

    # the jobs page: the token once, then project, version and spider picked from lists
    await page.get_by_role("link", name="Jobs", exact=True).click()
    await page.fill("#token", TOKEN)
    await page.select_option("#project", "shop")
    await expect(page.locator("#spider-pick option")).to_have_text(["titles (shop_spiders:Titles)"])
    options = await page.locator("#version option").all_text_contents()
    assert options[0].startswith("default (1.0"), options
    assert options[1].endswith(" UTC"), options
    await page.fill("#args", json.dumps({"site": site}))
    await page.fill("#settings", json.dumps({"concurrency": 1, "download_delay": 0.05}))
    await page.click("#start-button")
    await expect(page.locator("#job")).to_be_visible()
    job_id = (await page.locator("#job-id").text_content()) or ""
    assert job_id in monitor.jobs.jobs

    # its log, followed live and filtered
    log = page.locator("#log")
    await expect(log).to_contain_text("job_running", timeout=120_000)  # the project's venv
    await page.select_option("#log-level", "warning")
    assert "job_running" not in ((await log.text_content()) or "")
    await page.select_option("#log-level", "")
    await page.fill("#log-text", "job_running")
    await expect(log.locator(".line")).to_have_count(1)
    await page.fill("#log-text", "")
    assert await log.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"

    # its items, page by page, while it runs
    await page.select_option("#items-limit", "10")
    await expect(page.locator("#items-range")).to_contain_text(" of ", timeout=60_000)
    await eventually(lambda: _kept(page, 21), "21 items kept", timeout=60)
    await page.click("#items-next")
    await expect(page.locator("#items-range")).to_contain_text("11-20 of ")
    await expect(page.locator("#items tbody tr").first).to_have_attribute("data-index", "10")
    await expect(page.locator("#items thead")).to_contain_text("title")
    await _screenshot(page, shots(tmp_path) / "dashboard-job.png")

    # cancel it; its kept items download as JSON lines and CSV, every one of them
    await page.click("#job-cancel")
    await expect(page.locator("#job-state")).to_have_text("cancelled", timeout=30_000)
    done = await Client(monitor).job(job_id)
    kept = done["stats"]["items_kept"]
    assert kept >= 21
    async with page.expect_download() as caught:
        await page.click("#dl-jsonl")
    lines = (await _read(await caught.value)).splitlines()
    assert len(lines) == kept
    assert all(json.loads(line)["url"].startswith(site) for line in lines)
    async with page.expect_download() as caught:
        await page.click("#dl-csv")
    rows = list(csv.DictReader(io.StringIO(await _read(await caught.value))))
    assert [r["url"] for r in rows] == [json.loads(line)["url"] for line in lines]

    # re-run: a new job of the same spider, shown at once
    await page.click("#job-rerun")
    await expect(page.locator("#job-id")).not_to_have_text(job_id)
    again = (await page.locator("#job-id").text_content()) or ""
    rerun = await state_of(Client(monitor), again, "running", timeout=60)
    assert (rerun["project"], rerun["spider"]) == ("shop", "titles")  # named as first asked
    row = page.locator(f"#jobs tr[data-job='{again}'] .state")
    await expect(row).to_have_text("running")
    await Client(monitor).call("POST", f"/{again}/cancel")

    # the engines page: the engine with its jobs; a lost engine kept, a stalled one said
    doomed, stuck = [await asyncio.to_thread(engines, n) for n in ("doomed", "stuck")]
    await asyncio.to_thread(doomed.join)
    await asyncio.to_thread(stuck.join, stalled=True, loop_lag=7.5)
    await page.get_by_role("link", name="Engines", exact=True).click()
    await expect(page.locator("#engines tr[data-engine=e1] td.jobs")).to_contain_text("2 jobs")
    await expect(page.locator("#engines tr[data-engine=stuck] td.stalled")).to_have_text(
        "stalled (loop 7.5 s late)"
    )
    await asyncio.to_thread(doomed.vanish)
    gone = page.locator("#engines tr[data-engine=doomed][data-offline=lost] td.gone")
    await expect(gone).to_contain_text("lost (crashed or cut off) at ", timeout=30_000)
    await expect(gone).to_contain_text("no alert hook configured for it")
    assert "grace" not in ((await gone.text_content()) or "")
    await _screenshot(page, shots(tmp_path) / "dashboard-engines.png")
    assert errors == []


async def _kept(page: Any, at_least: int) -> bool:
    """Whether the pager counts ``at_least`` kept items (it re-reads while the job runs)."""
    text = (await page.locator("#items-range").text_content()) or ""
    count = text.partition(" of ")[2].replace(",", "")
    return count.isdigit() and int(count) >= at_least


async def _read(download: Any) -> str:
    path = await download.path()
    return await asyncio.to_thread(Path(path).read_text)


async def _screenshot(page: Any, path: Path) -> None:
    await page.screenshot(path=str(path), full_page=True)
