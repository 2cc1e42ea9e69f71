"""WARC output: every downloaded hop as a WARC/1.1 request and response record (warcio).

A ``warc`` feed (``-o crawl.warc.gz``, or ``format = "warc"`` in ``feeds``) archives
responses, not items: ``WarcMiddleware``, the innermost downloader middleware, hands
each hop's request and response to the ``WarcWriter``. Each file begins with a
``warcinfo`` record and, past ``warc_max_size`` bytes, the next file is begun
(``-00001`` before ``.warc.gz``, then ``-00002``...). A payload already archived by this
crawl (same payload digest) is written as a ``revisit`` record that refers to the
first. Every record is its own gzip member and reaches the operating system as it is
written, so a killed crawl's file reads up to its last whole record.

The response record holds the body as netdisco received it: decoded (aiohttp undoes
``Content-Encoding``), so that header (and ``Transfer-Encoding``) is kept as
``X-Archive-Orig-*`` and ``Content-Length`` is the decoded length. The request
record holds the request line and the headers netdisco set (``User-Agent``, ``Host``
and the request's own), not the defaults aiohttp adds.
"""

from __future__ import annotations

import http
import io
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from netdisco._version import __version__
from netdisco.crawl.middleware.base import Middleware
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response
from netdisco.exceptions import FeedError

if TYPE_CHECKING:
    from netdisco.crawl.spider import Spider

#: headers whose value no longer describes the decoded body we hold
_REWRITTEN = ("content-encoding", "transfer-encoding", "content-length")
#: payload digests remembered for revisits (the oldest are forgotten past this)
DIGESTS = 1_000_000


def _warcio() -> Any:
    try:
        import warcio.warcwriter
    except ImportError as exc:
        raise FeedError("the warc format needs warcio: pip install 'netdiscovery[warc]'") from exc
    return warcio


def rotated(path: str, serial: int) -> str:
    """The ``serial``-th file of a rotated feed: ``crawl-00001.warc.gz``."""
    if serial == 0:
        return path
    for suffix in (".warc.gz", ".warc"):
        if path.endswith(suffix):
            return f"{path.removesuffix(suffix)}-{serial:05d}{suffix}"
    return f"{path}-{serial:05d}"


class WarcWriter:
    """Writes request/response pairs to a WARC file; see the module docstring."""

    def __init__(self, path: str, *, max_size: int, overwrite: bool) -> None:
        self.path, self.max_size, self.overwrite = path, max_size, overwrite
        self.serial = 0
        self.files: list[str] = []
        self.records = 0  # written by this writer: warcinfo, requests, responses, revisits
        self._digests: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._out: IO[bytes] | None = None
        self._writer: Any = None
        self._open()

    def _open(self) -> None:
        warcio = _warcio()
        name = rotated(self.path, self.serial)
        try:
            self._out = open(name, "wb" if self.overwrite else "ab")  # noqa: SIM115 - kept open
        except OSError as exc:
            raise FeedError(f"feed {name!r} cannot be written: {exc.strerror}") from exc
        self._writer = warcio.warcwriter.WARCWriter(self._out, gzip=True, warc_version="1.1")
        info = {"software": f"netdisco/{__version__}", "format": "WARC File Format 1.1"}
        self._writer.write_record(self._writer.create_warcinfo_record(Path(name).name, info))
        self.records += 1
        self._out.flush()
        self.files.append(name)

    def write(self, request: Request, response: Response) -> None:
        """Archive one hop: its response (or a revisit) and its request, then hand them
        to the OS; past ``max_size`` the next file is begun."""
        assert self._out is not None, "the WARC file is closed"
        warcio = _warcio()
        status = warcio.statusandheaders.StatusAndHeaders
        record = self._writer.create_warc_record(
            response.url,
            "response",
            payload=io.BytesIO(response.body),
            length=len(response.body),
            http_headers=status(_status_line(response), _response_headers(response), "HTTP/1.1"),
        )
        digest = record.rec_headers.get_header("WARC-Payload-Digest")
        first = self._digests.get(digest)
        if first is None:
            self._remember(digest, response.url, record.rec_headers.get_header("WARC-Date"))
        else:
            record = self._writer.create_revisit_record(
                response.url, digest, first[0], first[1], http_headers=record.http_headers
            )
        line = _request_line(request, response.url)
        head = status(line, _request_headers(request, response.url), is_http_request=True)
        ask = self._writer.create_warc_record(response.url, "request", http_headers=head)
        self._writer.write_request_response_pair(ask, record)
        self.records += 2
        self._out.flush()
        if self.max_size and self._out.tell() >= self.max_size:
            self.close()
            self.serial += 1
            self._open()

    def _remember(self, digest: str, url: str, date: str) -> None:
        self._digests[digest] = (url, date)
        if len(self._digests) > DIGESTS:
            self._digests.popitem(last=False)

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    def close(self) -> None:
        if self._out is not None:
            out, self._out = self._out, None
            out.close()


def _status_line(response: Response) -> str:
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    return f"{response.status} {phrase}".rstrip()


def _response_headers(response: Response) -> list[tuple[str, str]]:
    headers: list[tuple[str, str]] = []
    for name, value in response.headers.items():
        if name.lower() in _REWRITTEN:
            if name.lower() != "content-length":
                headers.append((f"X-Archive-Orig-{name}", value))
            continue
        headers.append((name, value))
    headers.append(("Content-Length", str(len(response.body))))
    return headers


def _request_line(request: Request, url: str) -> str:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return f"{request.method} {target} HTTP/1.1"


def _request_headers(request: Request, url: str) -> list[tuple[str, str]]:
    headers = [("Host", urlsplit(url).netloc)]
    return headers + [(k, v) for k, v in request.headers.items() if k.lower() != "host"]


class Archive(Protocol):
    """Where a hop is archived (a ``warc`` feed)."""

    def archive(self, request: Request, response: Response) -> None: ...


class WarcMiddleware(Middleware):
    """Archives every hop's response, as it came from the download handler (it is the
    innermost middleware)."""

    def __init__(self, archives: Sequence[Archive], user_agent: str) -> None:
        self.archives, self.user_agent = archives, user_agent

    async def process_response(
        self, request: Request, response: Response, spider: Spider
    ) -> Response:
        sent = request
        if not any(k.lower() == "user-agent" for k in request.headers):
            headers = {"User-Agent": self.user_agent, **request.headers}
            sent = Request(request.url, request.method, headers)
        for archive in self.archives:
            archive.archive(sent, response)
        return response
