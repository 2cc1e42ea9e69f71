"""A running job's counters, as a person reads them while it runs: they flow from the
job's child through its engine's node (as a spider's figures do) to the monitor's job
routes, ``netdisco jobs list`` and the dashboard; the items pager never counts fewer
items than it shows. Real ZooKeeper, monitor and ``netdisco engine``."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from netdisco.testing import eventually
from tests.monitor.test_dashboard_walk import browser  # noqa: F401 - the fixture
from tests.monitor.test_http import CHROMIUM
from tests.monitor.test_job_names import cli
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    TOKEN,
    Client,
    site,
    spawn_engine,
    state_of,
    steering_engines,
)

#: a walk of the 200 slow pages one at a time, with a delay: some 20 s, four audits
SLOW_WALK = ["-a", "speed=slow", "-s", "concurrency=1", "-s", "download_delay=0.05"]


async def running_pages(client: Client, job_id: str, more_than: int) -> int | None:
    """The job's pages while it runs and once they are past ``more_than``; else None."""
    job: dict[str, Any] = await client.job(job_id)
    pages = job["stats"].get("succeeded")
    assert job["state"] in ("pending", "running"), job  # it must not end before this
    ok = job["state"] == "running" and isinstance(pages, int) and pages > more_than
    return pages if ok else None


async def test_a_running_jobs_counters_move_in_the_list_and_the_job(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
):
    monitor, client = await steering_engines(zk_hosts, start_monitor, spawn_engine, e1={})
    url = monitor.http.url
    code, out, err = await cli(url, "start", "-", "walk", "-a", f"site={site}", *SLOW_WALK)
    assert code == 0, err
    job_id = out.strip()
    seen: list[int] = []

    async def moved(more_than: int) -> bool:
        pages = await running_pages(client, job_id, more_than)
        if pages is not None:
            seen.append(pages)
        return pages is not None

    await eventually(lambda: moved(0), "pages counted while the job runs", timeout=30)
    await eventually(lambda: moved(seen[0]), "the pages counted again, more", timeout=30)
    code, listing, err = await cli(url, "list")
    assert code == 0, err
    row = next(line.split() for line in listing.splitlines() if line.startswith(job_id))
    assert row[1] == "running", listing
    assert row[-2].isdigit(), listing  # PAGES: not "-"
    assert row[-1].isdigit(), listing  # ITEMS
    status, answer = await client.call("GET", f"/{job_id}/items?offset=0&limit=5")
    assert status == 200, answer
    assert answer["items_kept"] >= len(answer["items"]) > 0, answer
    done = await state_of(client, job_id, "finished", "failed", timeout=90)
    assert done["state"] == "finished", done
    assert done["stats"]["succeeded"] >= seen[-1]
    # the engine's own page lists the jobs it ran
    (member,) = monitor.watcher.members()
    status_url = member.payload.status_url
    assert status_url is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(status_url, headers={"Accept": "text/html"}) as resp,
    ):
        page = await resp.text()
    jobs = page.partition("<h2>Jobs</h2>")[2]
    assert f"<td>{job_id}</td><td>finished</td>" in jobs, page


async def _pages_shown(page: Any, more_than: int, seen: list[int]) -> bool:
    """Whether the job page's counters read more pages than ``more_than`` while the job
    runs (its state shown as running); the reading is kept in ``seen``."""
    state = (await page.locator("#job-state").text_content()) or ""
    text = (await page.locator("#job-counters").text_content()) or ""
    assert state in ("pending", "running"), (state, text)  # it must not end before this
    pages = text.partition("pages ")[2].partition(" ")[0].replace(",", "")
    if state == "running" and pages.isdigit() and int(pages) > more_than:
        seen.append(int(pages))
        return True
    return False


async def _pager_agrees(page: Any) -> bool:
    """The pager's "A-B of N" against the rows shown: B - A + 1 rows, N at least B."""
    text, rows = await page.evaluate(  # one reading of both: the page re-reads its items
        """() => [document.getElementById("items-range").textContent,
                  document.querySelectorAll("#items tbody tr[data-index]").length]"""
    )
    shown, _, total = text.replace(",", "").partition(" of ")
    first, _, last = shown.partition("-")
    if not (first.isdigit() and last.isdigit() and total.isdigit()):
        return False
    assert (rows, int(total) >= int(last)) == (int(last) - int(first) + 1, True), text
    return True


@pytest.mark.browser
@pytest.mark.timeout(180)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent")
async def test_the_dashboard_shows_a_running_jobs_counters_move_and_its_pager_agrees(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    site,  # noqa: F811 - the fixture
    browser,  # noqa: F811 - the fixture
    tmp_path,
):
    from playwright.async_api import expect

    monitor, _ = await steering_engines(zk_hosts, start_monitor, spawn_engine, e1={})
    url = monitor.http.url
    walk = [*SLOW_WALK[:-1], "download_delay=0.1"]  # some 30 s: the page is read meanwhile
    code, out, err = await cli(url, "start", "-", "walk", "-a", f"site={site}", *walk)
    assert code == 0, err
    job_id = out.strip()
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{url}/jobs?interval=500#{job_id}")
    await page.fill("#token", TOKEN)
    await expect(page.locator("#job-id")).to_have_text(job_id)
    seen: list[int] = []
    await eventually(lambda: _pages_shown(page, 0, seen), "pages while it runs", timeout=40)
    await eventually(lambda: _pages_shown(page, seen[0], seen), "more pages", timeout=40)
    row = page.locator(f"#jobs tr[data-job='{job_id}'] td.num")
    assert [n.isdigit() for n in await row.all_text_contents()][-3:] == [True] * 3
    await page.select_option("#items-limit", "10")
    await eventually(lambda: _pager_agrees(page), "the pager over its rows", timeout=30)
    await page.screenshot(path=str(tmp_path / "running-job.png"), full_page=True)
    await expect(page.locator("#job-state")).to_have_text("finished", timeout=90_000)
    await eventually(lambda: _pager_agrees(page), "the pager at the end", timeout=30)
    assert errors == []


@pytest.mark.browser
@pytest.mark.timeout(180)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium absent")
async def test_the_dashboard_shows_why_a_job_failed_in_its_log(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    browser,  # noqa: F811 - the fixture
    tmp_path,
):
    """A spider its engine does not have (a module:Class, judged by the child): the job
    fails, and its log on its page says why, as its facts do."""
    from playwright.async_api import expect

    monitor, client = await steering_engines(zk_hosts, start_monitor, spawn_engine, e1={})
    url = monitor.http.url
    code, out, err = await cli(url, "start", "-", "tests.monitor.job_spiders:Nope")
    assert code == 0, err
    job_id = out.strip()
    failed = await state_of(client, job_id, "failed")
    assert "Nope" in failed["error"], failed
    page = await browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{url}/jobs?interval=500#{job_id}")
    await page.fill("#token", TOKEN)
    await expect(page.locator("#job-state")).to_have_text("failed")
    await expect(page.locator("#job-facts")).to_contain_text("Nope")
    log = page.locator("#log")
    await expect(log).to_contain_text("job_refused", timeout=30_000)
    await expect(log).to_contain_text("has no class 'Nope'")
    await page.screenshot(path=str(tmp_path / "failed-job.png"), full_page=True)
    assert errors == []
