"""``netdisco shell`` through a pseudo-terminal, as a person types into it: the page is
fetched with the spider's settings, selectors work, ``fetch`` and ``view`` do."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from netdisco.testing import serve
from tests.netdisco.sites import ROOT
from tests.netdisco.test_cli import NETDISCO, _env

PAGE = "<html><head><title>Hi there</title></head><body><a href='/b'>b</a></body></html>"
SPIDER = """\
from netdisco import Spider


class Probe(Spider):
    name = "probe"
    custom_settings = {"user_agents": ["shell-probe/1.0"], "obey_robots": False}
"""


@pytest.fixture
async def site() -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []  # (path, user agent) of each request

    async def page(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("User-Agent", "")))
        return web.Response(text=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    async with serve(app) as url:
        yield url, seen


def _session(args: list[str], lines: list[str], env: dict[str, str]) -> str:
    """Run the command on a pseudo-terminal, type ``lines``, return all it wrote."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [NETDISCO, *args], cwd=ROOT, env=env, stdin=follower, stdout=follower,
        stderr=follower, close_fds=True, start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    out = b""
    try:
        for line in [*lines, "exit()"]:
            out += _read_until(leader, b">>> ")
            os.write(leader, line.encode() + b"\n")
        process.wait(30)
        out += _read_until(leader, None)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return out.decode(errors="replace").replace("\r\n", "\n")


def _read_until(fd: int, prompt: bytes | None, timeout: float = 30.0) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (prompt and out.endswith(prompt)):
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out


async def test_the_shell_fetches_with_the_spiders_settings_and_selectors_work(
    site: tuple[str, list[tuple[str, str]]], tmp_path: Path
) -> None:
    url, seen = site
    spider = tmp_path / "probe.py"
    spider.write_text(SPIDER)
    typed = [
        'print("title", response.css("title::text").get())',
        f'other = fetch("{url}/second")',
        'print("now", response.url, response.status, request.url)',
        'print("view", view().read_text()[:80])',
    ]
    args = ["shell", f"{url}/first", "--spider", f"{spider}:Probe", "--plain"]
    out = await asyncio.to_thread(_session, args, typed, _env(BROWSER="true"))
    assert "title Hi there" in out, out
    assert f"now {url}/second 200 {url}/second" in out, out
    assert f'view <html><head><base href="{url}/second"><title>' in out, out
    assert seen == [("/first", "shell-probe/1.0"), ("/second", "shell-probe/1.0")]


async def test_the_shell_opens_without_a_url_and_says_what_is_there(tmp_path: Path) -> None:
    out = await asyncio.to_thread(
        _session, ["shell", "--plain"], ["print(response, spider.name)"], _env()
    )
    assert "fetch(x)    fetch a URL or a Request" in out, out
    assert "\nNone spider\n" in out, out  # nothing fetched; a plain Spider
