"""A ``scrapy startproject`` project deployed unchanged with ``netdisco deploy`` runs its spider
by name as a job, on a real ZooKeeper, monitor and engine, and keeps Scrapy's items:
settings.py read (its ITEM_PIPELINES, with ``from_crawler`` and the project's own
setting), ``import scrapy`` mapped in the job's child."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netdisco.testing import eventually
from tests.monitor.conftest import monitor_config
from tests.monitor.test_job_names import cli
from tests.monitor.test_jobs import (  # noqa: F401 - fixtures
    TOKEN,
    Client,
    spawn_engine,
    state_of,
    with_token,
)
from tests.netdisco.scrapy_reference.runs import EXPECTED, PROJECT, SPIDERS, normalised
from tests.netdisco.scrapy_reference.site import serve


@pytest.fixture
async def reference_site() -> AsyncIterator[str]:
    runner, base = await serve()
    yield base
    await runner.cleanup()


async def items_of(client: Client, job_id: str) -> str:
    """The job's kept items as JSON lines, through the monitor."""
    async with (
        aiohttp.ClientSession(headers=client.headers) as s,
        s.get(f"{client.base}/{job_id}/items", params={"format": "jsonl"}) as resp,
    ):
        assert resp.status == 200, await resp.text()
        return await resp.text()


async def run_by_name(
    monitor: Any, spawn: Any, project: str, spider: str, site: str
) -> tuple[Client, dict[str, Any]]:
    """A job of ``project``'s spider by its name on a new engine, run to its end."""
    await spawn("e1")
    await eventually(lambda: monitor.jobs.slots(), "an engine with slots", timeout=30)
    client = Client(monitor, TOKEN)
    (job,) = await client.start(project=project, spider=spider, args={"site": site})
    done = await state_of(client, job["id"], "finished", "failed", timeout=180)
    assert done["state"] == "finished", done["error"]
    return client, done


async def test_a_scrapy_project_deployed_unchanged_runs_its_spider_by_name_as_a_job(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    reference_site,
    tmp_path: Path,
):
    project = tmp_path / "bookproj"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__"))
    assert not (project / "requirements.txt").exists()  # scrapy.cfg and settings.py only
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    code, out, err = await cli(monitor.http.url, "deploy", str(project))
    assert code == 0, err
    assert '"project": "bookproj"' in out
    client, job = await run_by_name(monitor, spawn_engine, "bookproj", "books", reference_site)
    assert job["spider_class"] == "bookproj.spiders.books:BooksSpider"
    items = normalised(await items_of(client, job["id"]), reference_site)
    assert items == (EXPECTED / "books.jsonl").read_text().splitlines()
    log = await client.log(job["id"])
    assert "priced 3 books" in log  # the project's pipeline, as Scrapy ran it
    assert "TWISTED_REACTOR" in log  # settings.py's notes, in the job's log


def quotesbot(directory: Path) -> Path:
    """A project laid out as the public quotesbot is: spider files named with '-' (which
    Scrapy imports), a requirements.txt that names Scrapy, no pyproject.toml."""
    package = directory / "quotesbot"
    (package / "spiders").mkdir(parents=True)
    (directory / "scrapy.cfg").write_text("[settings]\ndefault = quotesbot.settings\n")
    (directory / "requirements.txt").write_text("scrapy>=2.11\n")
    (package / "__init__.py").write_text("")
    (package / "settings.py").write_text(
        'BOT_NAME = "quotesbot"\nSPIDER_MODULES = ["quotesbot.spiders"]\n'
        'NEWSPIDER_MODULE = "quotesbot.spiders"\n'
    )
    (package / "spiders" / "__init__.py").write_text("")
    shutil.copy(SPIDERS / "quotes.py", package / "spiders" / "toscrape-css.py")
    return directory


async def test_spider_files_named_with_a_dash_run_and_scrapy_is_never_installed(
    zk_hosts,
    start_monitor,
    spawn_engine,  # noqa: F811 - the fixture
    reference_site,
    tmp_path: Path,
):
    monitor, _ = await start_monitor(with_token(monitor_config(zk_hosts)))
    code, _, err = await cli(monitor.http.url, "deploy", str(quotesbot(tmp_path / "quotesbot")))
    assert code == 0, err
    client, job = await run_by_name(monitor, spawn_engine, "quotesbot", "quotes", reference_site)
    assert job["spider_class"] == "quotesbot.spiders.toscrape-css:QuotesSpider"
    items = normalised(await items_of(client, job["id"]), reference_site)
    assert items == (EXPECTED / "quotes.jsonl").read_text().splitlines()
    venvs = list((tmp_path / "e1" / "projects" / "quotesbot").glob("*/venv"))
    assert len(venvs) == 1
    site_packages = next(venvs[0].glob("lib/python*/site-packages"))
    assert (site_packages / "itemadapter").is_dir()  # the project's environment, built
    assert not (site_packages / "scrapy").exists()  # its `import scrapy` is netdisco's
