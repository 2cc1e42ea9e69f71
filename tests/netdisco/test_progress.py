"""The live progress display: ``netdisco crawl`` and ``netdisco engine`` on a pseudo-terminal
against a loopback site (drawn in place, logs above it, the summary after it), and on a
pipe (no escape code, the progress lines as before)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from netdisco.testing import free_port
from tests import hangs
from tests.netdisco.sites import ROOT, Site, running_site
from tests.netdisco.test_cli import NETDISCO, _env, run_cli

#: pages of 0.15 s each, two at a time on the one host: about 2 s of crawl, with
#: requests set aside for the busy host and one page that fails (404)
SPIDER = """\
from netdisco import Spider


class Slow(Spider):
    name = "{name}"
    start_urls = [*(f"{base}/slow/{{n}}?s=0.15" for n in range(24)), "{base}/status/404"]
    custom_settings = {{"obey_robots": False, "concurrency": 4, "per_host_concurrency": 2,
                        "retries": 0}}

    def parse(self, response):
        yield {{"url": response.url}}
"""
#: what rich writes to draw in place: cursor up, erase the line
CURSOR_UP, ERASE_LINE = "\x1b[1A", "\x1b[2K"
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with running_site() as served:
        yield served


def _spider(tmp_path: Path, site: Site, name: str = "slow") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(SPIDER.format(name=name, base=site.base))
    return f"{path}:Slow"


#: how long a run may take before the test fails (not a measure: a deadline for a hang)
DEADLINE = 45.0


def _on_terminal(
    args: list[str], env: dict[str, str], stop_on: Callable[[str], bool] | None = None
) -> str:
    """Run ``netdisco ARGS`` with a 160x40 pseudo-terminal as stdin, stdout and stderr; all
    it wrote. ``stop_on``: SIGTERM it once what it wrote satisfies this (an engine serves
    on until then); without, it must end by itself. Either way within ``DEADLINE``."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(
        [NETDISCO, *args], cwd=ROOT, env=env, stdin=follower, stdout=follower,
        stderr=follower, close_fds=True, start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    out, deadline = b"", time.monotonic() + DEADLINE
    try:
        while time.monotonic() < deadline:
            if stop_on is not None and stop_on(out.decode(errors="replace")):
                process.send_signal(signal.SIGTERM)
                stop_on = None
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # every end of the terminal closed: the process is gone
                    break
                if not chunk:
                    break
                out += chunk
        else:
            hangs.witness(2, f"netdisco {' '.join(args)}")  # where its processes wait
            raise AssertionError(
                f"still running after {DEADLINE:g} s: {out.decode(errors='replace')!r}"
            )
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
    assert process.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def _frames(out: str) -> list[str]:
    """The pictures the display drew, escape codes removed (rich starts each redraw by
    moving the cursor back up over the previous one)."""
    return [ESCAPE.sub("", part) for part in out.split(ERASE_LINE + CURSOR_UP) if part.strip()]


async def test_crawl_on_a_terminal_draws_the_counters_in_place_then_the_summary(
    site: Site, tmp_path: Path
) -> None:
    args = ["crawl", _spider(tmp_path, site), "-s", "progress_interval=0.2"]
    out = await asyncio.to_thread(_on_terminal, args, _env())
    assert out.count(CURSOR_UP) >= 5, out  # redrawn over itself, again and again
    headers = [f for f in _frames(out) if re.search(r"spider\s+state\s+pages\s+pages/s", f)]
    assert len(headers) >= 3, out
    rows = [re.search(r"slow\s+running\s+(\d+)\s+[\d.]+\s+(\d+)", f) for f in headers]
    pages = [int(m.group(1)) for m in rows if m]
    assert pages == sorted(pages), out  # the counters move
    assert pages[-1] > pages[0], out
    assert any(
        re.search(rf"127\.0\.0\.1:{site.base.rsplit(':', 1)[1]}\s+slow\s+2\s+[1-9]", f)
        for f in headers
    ), out  # fmt: skip   the busy host: 2 in flight, some waiting
    assert "last error (slow):" in out
    assert "HTTP 404" in out
    tail = ESCAPE.sub("", out.rsplit("\x1b[?25h", 1)[-1])  # after the display is gone
    assert "Spider slow finished in" in tail, out
    assert "24 ok, 1 failed" in tail, out
    assert "request_failed" in out  # the log line printed above the display, whole
    plain = ESCAPE.sub("", out)
    assert not re.search(r"\bprogress\b.*pages=", plain), out  # the display replaces them


async def test_crawl_on_a_pipe_writes_no_escape_code_and_logs_progress_lines(
    site: Site, tmp_path: Path
) -> None:
    args = ["crawl", _spider(tmp_path, site), "-s", "progress_interval=0.2"]
    code, out, err = await run_cli(*args)
    assert code == 0, err
    assert "\x1b" not in out + err, err
    assert '"event": "progress"' in err, err
    assert '"event": "crawl_summary"' in err


async def test_no_progress_on_a_terminal_logs_lines_and_draws_nothing(
    site: Site, tmp_path: Path
) -> None:
    args = ["crawl", _spider(tmp_path, site), "--no-progress", "-s", "progress_interval=0.2"]
    out = await asyncio.to_thread(_on_terminal, args, _env())
    assert ERASE_LINE not in out, out
    assert "busiest hosts" not in out, out
    assert "progress" in out, out
    assert "Spider slow finished in" in out, out


async def test_j2_on_a_terminal_shows_one_display_for_every_worker(
    site: Site, tmp_path: Path
) -> None:
    args = ["crawl", _spider(tmp_path, site), "-j", "2"]
    out = await asyncio.to_thread(_on_terminal, args, _env())
    frames = _frames(out)
    assert any("netdisco crawl slow (2 of 2 processes)" in f for f in frames), out
    assert any(re.search(r"slow\s+running\s+[1-9]\d*\s", f) for f in frames), out
    assert any(re.search(r"127\.0\.0\.1:\d+\s+slow\s+[1-9]", f) for f in frames), out
    tail = ESCAPE.sub("", out.rsplit("\x1b[?25h", 1)[-1])
    assert "Spider slow finished in" in tail, out
    assert "24 ok, 1 failed" in tail, out


async def test_engine_on_a_terminal_shows_one_row_per_spider(site: Site, tmp_path: Path) -> None:
    entries = []
    for name in ("alpha", "beta"):
        entries.append(f'[[spiders]]\nspider = "{_spider(tmp_path, site, name)}"\n')
    config = tmp_path / "engine.toml"
    config.write_text(f'[engine]\nid = "live-engine"\nport = {free_port()}\n' + "".join(entries))
    args = ["engine", "--config", str(config)]

    def drawn(out: str) -> bool:
        """Redrawn in place, with both spiders' rows showing pages (stopped then, not at
        a fixed time: a loaded machine starts slowly)."""
        frames = [f for f in _frames(out) if "engine live-engine" in f]
        running = [rf"{name}\s+running\s+[1-9]" for name in ("alpha", "beta")]
        return (
            len(frames) >= 3
            and out.count(CURSOR_UP) >= 5
            and any("zookeeper: standalone" in f for f in frames)
            and all(any(re.search(row, f) for f in frames) for row in running)
        )

    out = await asyncio.to_thread(_on_terminal, args, _env(), drawn)
    frames = [f for f in _frames(out) if "engine live-engine" in f]
    assert drawn(out), out
    last = frames[-1]  # stays once the engine stopped: both spiders' final rows
    assert re.search(r"alpha\s+(stopped|finished)", last), out
    assert re.search(r"beta\s+(stopped|finished)", last), out
    assert "engine_stopped" in ESCAPE.sub("", out)


async def test_engine_display_names_an_unreachable_zookeeper(site: Site, tmp_path: Path) -> None:
    hosts = f"127.0.0.1:{free_port()}"  # nothing listens there
    config = tmp_path / "engine.toml"
    config.write_text(
        f'[engine]\nid = "lonely"\nport = {free_port()}\n'
        f'[zookeeper]\nhosts = "{hosts}"\nsession_timeout = 0.5\n'
        f'[[spiders]]\nspider = "{_spider(tmp_path, site)}"\n'
    )
    args = ["engine", "--config", str(config)]
    said = rf"zookeeper: unregistered: ZooKeeper {re.escape(hosts)} unreachable since 20\d\d-"

    def named(out: str) -> bool:
        frames = [" ".join(f.split()) for f in _frames(out) if "engine lonely" in f]
        return any(re.search(said, f) for f in frames)

    out = await asyncio.to_thread(_on_terminal, args, _env(), named)
    assert named(out), out
