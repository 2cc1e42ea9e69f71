"""What ``netdisco demo`` crawls and where its alerts go: a generated site, spiders, an SMTP sink.

The site has three sections (``shop``, ``blog``, ``docs``) of ``PAGES`` pages
each; every page answers after a small, page-dependent delay so that a crawl
takes long enough to watch. Page N links to pages 2N+1 and 2N+2 of its section
(a binary tree: every page is reachable) and back to the section's first page.

Each demo engine runs one of the spiders below. The engines are separate
processes started from a generated TOML file, so the spiders learn the site's
address and the item directory from the environment (``SITE_ENV``, ``ITEMS_ENV``).
"""

from __future__ import annotations

import asyncio
import collections
import email
import email.policy
import html
import os
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from aiohttp import web

from netdisco.crawl.pipelines import JsonLinesPipeline, Pipeline
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.crawl.spider import Spider

SECTIONS = ("shop", "blog", "docs")
PAGES = 400
SITE_ENV = "NETDISCO_DEMO_SITE"
ITEMS_ENV = "NETDISCO_DEMO_ITEMS"
DEFAULT_SITE = "http://127.0.0.1:8000"
MAILS_KEPT = 500  # the sink's web view lists the latest this many
MAIL_MAX_BYTES = 1 << 20  # a bigger message is refused (552), not kept


def latency(number: int) -> float:
    """50 to 240 ms, varying from page to page but the same on every run."""
    return 0.05 + (number * 37 % 20) / 100


async def _page(request: web.Request) -> web.Response:
    section = request.match_info["section"]
    number = int(request.match_info["number"])
    if number >= PAGES:
        raise web.HTTPNotFound()
    await asyncio.sleep(latency(number))
    links = "".join(
        f'<li><a href="/{section}/{child}">{section} page {child}</a></li>'
        for child in (2 * number + 1, 2 * number + 2, 0)
        if child < PAGES
    )
    html = (
        f"<html><head><title>{section} {number}</title></head><body>"
        f"<h1>{section.title()} page {number}</h1>"
        f'<p class="summary">Generated page {number} of the {section} section.</p>'
        f"<ul>{links}</ul></body></html>"
    )
    return web.Response(text=html, content_type="text/html")


async def _robots(request: web.Request) -> web.Response:
    return web.Response(text="User-agent: *\nAllow: /\n")


async def start_site(host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Serve the site in the running loop; the runner (for ``cleanup()``) and the base URL."""
    app = web.Application()
    sections = "|".join(SECTIONS)
    app.router.add_get(f"/{{section:{sections}}}/{{number:\\d+}}", _page)
    app.router.add_get("/robots.txt", _robots)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}"


async def serve_site(bind: str) -> int:
    """``netdisco demo --site HOST:PORT``: only the website, until SIGINT or SIGTERM.

    The compose stack crawls it from its own container.
    """
    host, _, port = bind.rpartition(":")
    runner, base = await start_site(host or "0.0.0.0", int(port))
    print(f"demo website at {base}/ ({', '.join(SECTIONS)}: {PAGES} pages each)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    print("demo website stopped", flush=True)
    return 0


class DemoSpider(Spider):
    """Crawls one section of the demo site and writes its items as JSON lines."""

    section: ClassVar[str] = ""
    # read when the engine imports this module, in its own environment
    allowed_domains = (urlsplit(os.environ.get(SITE_ENV, DEFAULT_SITE)).hostname or "",)
    custom_settings: ClassVar[dict[str, Any]] = {"concurrency": 4, "per_host_concurrency": 4}

    async def start(self) -> AsyncIterator[Request]:
        base = os.environ.get(SITE_ENV, DEFAULT_SITE).rstrip("/")
        yield Request(f"{base}/{self.section}/0", callback=self.parse)

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield {
            "section": self.section,
            "url": response.url,
            "title": response.css("h1::text").get(),
            "summary": response.css("p.summary::text").get(),
        }
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

    def pipelines(self) -> list[Pipeline]:
        items = Path(os.environ.get(ITEMS_ENV, "out/items"))
        return [JsonLinesPipeline(items / f"{self.name}.jsonl")]


class Shop(DemoSpider):
    name = "shop"
    section = "shop"


class Blog(DemoSpider):
    name = "blog"
    section = "blog"


class Docs(DemoSpider):
    name = "docs"
    section = "docs"


SPIDERS: dict[str, type[DemoSpider]] = {"shop": Shop, "blog": Blog, "docs": Docs}


@dataclass(frozen=True)
class Mail:
    """One message as the sink received it."""

    sender: str
    recipients: tuple[str, ...]
    message: EmailMessage

    def body(self) -> str:
        """The plain-text body (the first text part of a multipart message)."""
        part = self.message.get_body(preferencelist=("plain", "html"))
        return "" if part is None else str(part.get_content())


class _SinkHandler:
    """aiosmtpd handler: accept every message and hand it to the sink."""

    def __init__(self, sink: SmtpSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        mail = Mail(envelope.mail_from, tuple(envelope.rcpt_tos), message)
        self.sink.received.append(mail)
        if self.sink.mails.full():  # nobody waits on them (``netdisco dev``): the oldest goes
            self.sink.mails.get_nowait()
        self.sink.mails.put_nowait(mail)
        return "250 Message accepted for delivery"


class SmtpSink:
    """An SMTP server in the running loop that keeps every message it receives: ``mails``
    for whoever waits on the next one, ``received`` (the latest ``MAILS_KEPT``) for the
    web view (``mail_view``)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.mails: asyncio.Queue[Mail] = asyncio.Queue(maxsize=MAILS_KEPT)
        self.received: collections.deque[Mail] = collections.deque(maxlen=MAILS_KEPT)
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        """Listen on ``port`` (0: a free one) and return it."""
        from aiosmtpd.smtp import SMTP  # the demo extra; the library does not need it

        handler = _SinkHandler(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SMTP(handler, hostname=self.host, data_size_limit=MAIL_MAX_BYTES, loop=loop),
            self.host,
            port,
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None


def _mail_json(mail: Mail) -> dict[str, Any]:
    fields = {name: str(mail.message[name] or "") for name in ("From", "To", "Subject", "Date")}
    return {"sender": mail.sender, "recipients": list(mail.recipients), **fields,
            "body": mail.body()}  # fmt: skip


def mail_view(sink: SmtpSink) -> web.Application:
    """The sink's web view: ``/`` lists the mails it caught (newest first), ``/mails.json``
    the same as JSON."""

    async def page(request: web.Request) -> web.Response:
        rows = "".join(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td></tr>".format(
                *(html.escape(m[k]) for k in ("Date", "To", "Subject", "body"))
            )
            for m in map(_mail_json, reversed(sink.received))
        )
        text = (
            '<!doctype html><html><head><meta charset="utf-8"><title>netdisco mail sink'
            "</title></head><body>"
            f"<h1>Mails caught by {sink.host}:{sink.port} ({len(sink.received)})</h1>"
            "<table><tr><th>Date</th><th>To</th><th>Subject</th><th>Body</th></tr>"
            f"{rows}</table></body></html>"
        )
        return web.Response(text=text, content_type="text/html")

    async def listing(request: web.Request) -> web.Response:
        return web.json_response([_mail_json(m) for m in reversed(sink.received)])

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/mails.json", listing)
    return app


async def start_mail_view(
    sink: SmtpSink, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Serve ``mail_view`` in the running loop; the runner and its URL."""
    runner = web.AppRunner(mail_view(sink), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, f"http://{host}:{runner.addresses[0][1]}/"


async def serve_sink(smtp_port: int, web_port: int, host: str = "127.0.0.1") -> int:
    """``netdisco dev sink``: the SMTP sink and its web view, until SIGINT or SIGTERM."""
    sink = SmtpSink(host)
    await sink.start(smtp_port)
    runner, url = await start_mail_view(sink, host, web_port)
    print(f"SMTP sink on {host}:{sink.port}, its mails at {url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await sink.stop()
    print("SMTP sink stopped", flush=True)
    return 0
