"""``netdisco shell``: try selectors on a live page, fetched as the spider fetches it.

The page comes through the spider's real downloader (its settings, middleware,
robots.txt, retries, redirects), the same quiet crawler ``netdisco parse`` uses: nothing
is written. An interactive console is synchronous and the downloader lives on an event
loop, so the loop runs in a thread of its own for the whole session and the console
(IPython when it is installed, else Python's own) hands each ``fetch`` over to it and
waits for the answer.
"""

from __future__ import annotations

import asyncio
import code
import re
import tempfile
import threading
import webbrowser
from collections.abc import Callable
from concurrent.futures import Future
from html import escape
from pathlib import Path
from typing import Any

from netdisco.crawl.crawler import Crawler
from netdisco.crawl.probe import fetch_now, quiet_crawler
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.settings import Settings
from netdisco.crawl.spider import Spider

HELP = """\
netdisco shell: the names at hand
  response    the last page fetched (response.css(...), .xpath(...), .follow(...))
  request     the request that fetched it
  fetch(x)    fetch a URL or a Request through the spider's downloader; sets response
  view(r)     open a response (default: the last) in a web browser, from a temporary file
  spider      the spider object, with its settings and middleware in force
  settings    the settings of this session
  shelp()     this help"""

_HEAD = re.compile(rb"<head[^>]*>", re.IGNORECASE)


class Shell:
    """The console's names and the loop thread its fetches run on."""

    def __init__(self, spider: Spider, settings: Settings) -> None:
        self.spider = spider
        self.settings = settings
        self.response: Response | None = None
        self.request: Request | None = None
        self.namespace: dict[str, Any] = {}
        self._loop = asyncio.new_event_loop()
        self._crawler: Future[Crawler] = Future()
        self._closing: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, name="netdisco-shell", daemon=True)

    def __enter__(self) -> Shell:
        self._thread.start()
        self._crawler.result()  # raises what opening the downloader raised
        self._refresh()
        return self

    def __exit__(self, *exc: object) -> None:
        closing = self._closing
        if closing is not None:
            self._loop.call_soon_threadsafe(closing.set)
        self._thread.join(30)

    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._open_until_closed())
        finally:
            self._loop.close()

    async def _open_until_closed(self) -> None:
        self._closing = asyncio.Event()
        try:
            async with quiet_crawler(self.spider, self.settings) as crawler:
                self._crawler.set_result(crawler)
                await self._closing.wait()
        except BaseException as exc:  # opening failed: the console must not wait for ever
            if not self._crawler.done():
                self._crawler.set_exception(exc)
            raise

    def fetch(self, target: str | Request) -> Response:
        """Fetch a URL (or a request) through the spider's downloader; it becomes ``response``."""
        request = target if isinstance(target, Request) else Request(target)
        crawler = self._crawler.result()
        future = asyncio.run_coroutine_threadsafe(fetch_now(crawler, request), self._loop)
        self.request, self.response = request, future.result()
        self._refresh()
        return self.response

    def view(self, response: Response | None = None) -> Path:
        """Open ``response`` (the last one by default) in a browser; returns the file.

        A ``<base href>`` of the page's URL is put first in its head so that its links,
        styles and images resolve against the site, not the temporary file.
        """
        shown = response or self.response
        if shown is None:
            raise ValueError("nothing fetched yet: fetch(url) first")
        base = f'<base href="{escape(shown.url, quote=True)}">'.encode()
        body, added = _HEAD.subn(lambda m: m.group(0) + base, shown.body, count=1)
        with tempfile.NamedTemporaryFile("wb", prefix="netdisco-", suffix=".html",
                                         delete=False) as out:  # fmt: skip
            out.write(body if added else base + body)
        path = Path(out.name)
        webbrowser.open(path.as_uri())
        return path

    def _refresh(self) -> None:
        self.namespace.update(
            response=self.response, request=self.request, fetch=self.fetch, view=self.view,
            spider=self.spider, settings=self.settings, shelp=lambda: print(HELP),
        )  # fmt: skip


def interact(shell: Shell, *, plain: bool = False) -> None:
    """Run the console on the shell's names until the user leaves it (EOF, ``exit()``)."""
    banner = HELP + (f"\n[fetched] {shell.response}" if shell.response is not None else "")
    start = None if plain else _ipython()
    if start is None:
        code.interact(banner=banner, local=shell.namespace, exitmsg="")
    else:
        print(banner)
        start(shell.namespace)


def _ipython() -> Callable[[dict[str, Any]], object] | None:
    """IPython's console when it is installed (an optional extra, never required)."""
    try:
        from IPython import start_ipython  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return lambda names: start_ipython(argv=["--no-banner"], user_ns=names)
