"""WARC output: crawl a loopback site into WARC files and read them back with warcio."""

from __future__ import annotations

import base64
import gzip
import hashlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from warcio.archiveiterator import ArchiveIterator

from netdisco import Crawler, Response, Settings, Spider
from netdisco.crawl.feeds import cli_feed, parse_feeds
from netdisco.exceptions import ConfigError

WARCIO = Path(sys.executable).parent / "warcio"
SAME = b"<html><body>the same page twice</body></html>"


async def handle(request: web.Request) -> web.StreamResponse:
    path = request.path
    if path == "/":
        links = "".join(f'<a href="{p}">{p}</a>' for p in ("/a", "/b", "/moved", "/zipped"))
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")
    if path in ("/a", "/b"):  # one payload at two URLs: the second is a revisit
        return web.Response(body=SAME, content_type="text/html")
    if path == "/moved":
        raise web.HTTPFound("/target")
    if path == "/zipped":
        body = gzip.compress(b"<html><body>compressed on the wire</body></html>")
        return web.Response(
            body=body, headers={"Content-Encoding": "gzip", "Content-Type": "text/html"}
        )
    return web.Response(text=f"<html><body>{path}</body></html>", content_type="text/html")


@pytest.fixture
async def base() -> AsyncIterator[str]:
    from netdisco.testing import serve

    app = web.Application()
    app.router.add_get("/{path:.*}", handle)
    async with serve(app) as url:
        yield url


class Follow(Spider):
    name = "warc"

    def parse(self, response: Response) -> Iterator[Any]:
        yield from response.follow_all(css="a")


def records(path: Path) -> list[Any]:
    with path.open("rb") as stream:
        return [
            (r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read())
            for r in ArchiveIterator(stream)
        ]


def warcio(tool: str, path: Path) -> None:
    """``warcio check`` / ``warcio index`` accept the file."""
    done = subprocess.run([WARCIO, tool, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def sha1(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


async def crawl(base: str, tmp_path: Path, **settings: Any) -> None:
    feeds = parse_feeds("feeds", {str(tmp_path / "{spider}-{engine}.warc.gz"): {}})
    s = Settings(obey_robots=False, concurrency=2, feeds=feeds, **settings)
    await Crawler(Follow(start_urls=[base + "/"]), s, engine="e1").run()


async def test_a_crawl_is_archived_as_request_and_response_records(
    base: str, tmp_path: Path
) -> None:
    await crawl(base, tmp_path)
    path = tmp_path / "warc-e1.warc.gz"
    read = records(path)
    assert read[0][0] == "warcinfo"
    assert read[0][1].protocol == "WARC/1.1"
    kinds = [r[0] for r in read[1:]]
    assert kinds.count("request") == 6  # /, /a, /b, /moved, /target, /zipped: each hop
    assert kinds.count("response") + kinds.count("revisit") == 6
    assert kinds.count("revisit") == 1
    by_url = {r[1].get_header("WARC-Target-URI"): r for r in read if r[0] != "request"}
    response = by_url[base + "/a"] if by_url[base + "/a"][0] == "response" else by_url[base + "/b"]
    assert response[3] == SAME
    assert response[1].get_header("WARC-Payload-Digest") == sha1(SAME)
    revisit = next(r for r in read if r[0] == "revisit")
    assert revisit[1].get_header("WARC-Payload-Digest") == sha1(SAME)
    assert revisit[1].get_header("WARC-Refers-To-Target-URI") == response[1].get_header(
        "WARC-Target-URI"
    )
    moved = by_url[base + "/moved"]
    assert moved[2].get_statuscode() == "302"
    assert moved[2].get_header("Location") == "/target"
    zipped = by_url[base + "/zipped"]
    assert zipped[3] == b"<html><body>compressed on the wire</body></html>"
    assert zipped[2].get_header("X-Archive-Orig-Content-Encoding") == "gzip"
    request = next(
        r for r in read if r[0] == "request" and r[1].get_header("WARC-Target-URI") == base + "/a"
    )
    assert request[2].protocol == "GET"
    assert request[2].statusline == "/a HTTP/1.1"
    assert request[2].get_header("User-Agent").startswith("netdisco/")
    for tool in ("check", "index"):
        warcio(tool, path)


async def test_files_rotate_by_size_each_with_its_warcinfo(base: str, tmp_path: Path) -> None:
    await crawl(base, tmp_path, warc_max_size=1500)
    rotated = sorted(tmp_path.glob("warc-e1-*.warc.gz"))  # noqa: ASYNC240 - a few files
    files = [tmp_path / "warc-e1.warc.gz", *rotated]
    assert len(files) >= 3
    assert [f.name for f in rotated[:2]] == ["warc-e1-00001.warc.gz", "warc-e1-00002.warc.gz"]
    total = 0
    for path in files:
        read = records(path)
        assert read[0][0] == "warcinfo"
        assert read[0][1].get_header("WARC-Filename") == path.name
        total += sum(r[0] == "request" for r in read)
        warcio("check", path)
    assert total == 6


#: a child writes 50 records, says so, then waits (a crawl waiting on the network)
WRITER = """
import sys, time
from multidict import CIMultiDict
from netdisco import Request, Response
from netdisco.crawl.feeds.warc import WarcWriter
writer = WarcWriter(sys.argv[1], max_size=0, overwrite=True)
for n in range(50):
    url = f"http://127.0.0.1:9/page/{n}"
    body = f"<html>{n}</html>".encode()
    writer.write(Request(url), Response(url, 200, CIMultiDict(), body, Request(url)))
print("written", flush=True)
time.sleep(60)
"""


def test_a_killed_writer_leaves_a_file_readable_to_its_last_whole_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "killed.warc.gz"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "written"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    child.stdout.close()
    whole = path.read_bytes()
    with path.open("ab") as out:  # as if killed halfway through the next record
        out.write(whole[len(whole) // 2 : len(whole) // 2 + 300])
    responses, error = read_to_the_tear(path)
    assert responses == 50  # every record written before the kill
    assert error is not None  # and then the torn one


def read_to_the_tear(path: Path) -> tuple[int, Exception | None]:
    """How many response records read whole, and what stopped the reading (if anything)."""
    responses = 0
    with path.open("rb") as stream:
        try:
            for record in ArchiveIterator(stream):
                record.content_stream().read()
                responses += record.rec_type == "response"
        except Exception as exc:  # warcio's error for a torn gzip member
            return responses, exc
    return responses, None


def test_o_warc_gz_is_a_warc_feed_and_stdout_is_refused() -> None:
    assert cli_feed("crawl.warc.gz", overwrite=False).format == "warc"
    assert cli_feed("out/{spider}.warc", overwrite=True).format == "warc"
    with pytest.raises(ConfigError, match="WARC"):
        cli_feed("-:warc", overwrite=False)
