"""The spiders we suggest crawl pages the example site serves.

``netdisco dev up`` prints a spider for the user's engine file and docs/projects.md
deploys a ``Shop``; both are meant for the site the README tells the user to serve
(``python examples/local_site.py --port 8000``). Each is crawled here against that
site, as written, its ``127.0.0.1:8000`` moved to the test's own port.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from netdisco import Crawler, Settings
from netdisco.crawl.loader import load_spider
from netdisco.demo.site import SITE_ENV
from netdisco.dev import engine_lines
from tests.netdisco.sites import load_example

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
async def example_site() -> AsyncIterator[str]:
    """``examples/local_site.py``'s site at the root of a loopback port, as a user serves it."""
    runner = web.AppRunner(load_example("local_site").make_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"127.0.0.1:{port}"
    await runner.cleanup()


def _block(text: str, opening: str, end: str) -> str:
    """The lines of a document from the one that is ``opening`` up to ``end``."""
    found = re.search(rf"^{re.escape(opening)}\n(.*?)^{re.escape(end)}$", text, re.M | re.S)
    assert found, opening
    return found.group(1)


def _spider_file(tmp_path: Path, name: str, source: str, address: str) -> Path:
    path = tmp_path / name
    path.write_text(source.replace("127.0.0.1:8000", address))
    return path


async def _crawled(ref: str) -> tuple[int, int]:
    crawler = Crawler(load_spider(ref)(), Settings(max_pages=3, retries=0))
    stats = await crawler.run()
    return stats.succeeded, stats.failed


async def test_the_spider_dev_up_suggests_crawls_the_example_site(
    example_site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = tomllib.loads(engine_lines({"zookeeper": 1, "redis": 2}))["spiders"][0]["spider"]
    monkeypatch.setenv(SITE_ENV, f"http://{example_site}")  # the demo spiders' site
    file, sep, cls = ref.rpartition(":")
    if file.endswith(".py"):  # the README's quick-start spider, written as the README does
        readme = (ROOT / "README.md").read_text("utf-8")
        source = _block(readme, f"# {file}", "```")
        ref = f"{_spider_file(tmp_path, file, source, example_site)}{sep}{cls}"
    succeeded, failed = await _crawled(ref)
    assert (failed, succeeded > 0) == (0, True), ref


async def test_the_projects_shop_crawls_the_example_site(example_site: str, tmp_path: Path) -> None:
    projects = (ROOT / "docs" / "projects.md").read_text("utf-8")
    source = _block(projects, "cat > shopproj/shopproj/spiders.py <<'EOF'", "EOF")
    path = _spider_file(tmp_path, "shop_spiders.py", source, example_site)
    succeeded, failed = await _crawled(f"{path}:Shop")
    assert (failed, succeeded > 0) == (0, True)
