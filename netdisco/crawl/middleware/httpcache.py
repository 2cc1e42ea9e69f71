"""An HTTP cache for development: a second run of a spider sends nothing to the server.

``http_cache = "DIR"`` answers each request from ``DIR/<spider>/`` when it holds a
response to the same request, and stores every response it does not hold (a 5xx or a
429 excepted: they are worth asking again). The key is the request's fingerprint (its
canonical URL), its method and a hash of its body, so a cached answer is never served
for another method or another body. ``http_cache_expiration`` (seconds, 0: never) ages
entries out. The cache is a directory of JSON files, one per response: delete it to
start afresh. It is the first middleware in the chain, so a cached page waits for no
host slot and no delay; robots.txt goes through the same cache (``wrap``). It is a
development tool: no HTTP freshness rules (RFC 9111) are applied.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from multidict import CIMultiDict

from netdisco.crawl.middleware.base import Middleware
from netdisco.crawl.request import Request
from netdisco.crawl.response import Response

if TYPE_CHECKING:
    from netdisco.crawl.spider import Spider
    from netdisco.crawl.transport import DownloadHandler

log = structlog.get_logger(__name__)
#: statuses not stored: asking again may well answer better
NOT_STORED = frozenset({429, 500, 502, 503, 504})


class HttpCache(Middleware):
    """See the module docstring; ``directory`` is the spider's own (``DIR/<spider>``)."""

    def __init__(self, directory: str | Path, expiration: float = 0.0) -> None:
        self.directory = Path(directory)
        self.expiration = expiration
        self.hits = 0
        self.stored = 0
        self._answered: set[int] = set()  # ids of the responses the cache gave (in the chain)

    async def process_request(self, request: Request, spider: Spider) -> Request | Response | None:
        cached = self.lookup(request)
        if cached is not None:
            self._answered.add(id(cached))  # process_response follows at once: not stored
        return cached

    async def process_response(
        self, request: Request, response: Response, spider: Spider
    ) -> Response:
        if id(response) in self._answered:
            self._answered.discard(id(response))
        else:
            self.store(request, response)
        return response

    def wrap(self, handler: DownloadHandler) -> DownloadHandler:
        """``handler`` behind this cache (robots.txt, which bypasses the chain)."""
        return _Cached(self, handler)

    def key(self, request: Request) -> str:
        """The request's fingerprint (or URL), method and body, hashed."""
        body = hashlib.sha256(request.body or b"").hexdigest()
        identity = request.fingerprint.hex() or request.url
        return hashlib.sha256(f"{request.method}\n{identity}\n{body}".encode()).hexdigest()

    def _path(self, request: Request) -> Path:
        key = self.key(request)
        return self.directory / key[:2] / f"{key}.json"

    def lookup(self, request: Request) -> Response | None:
        """The stored response to ``request``, if there is a fresh one."""
        path = self._path(request)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        fresh = not self.expiration or time.time() - entry["stored"] < self.expiration
        if not fresh or entry["method"] != request.method or entry["url"] != request.url:
            return None
        self.hits += 1
        headers = CIMultiDict(entry["headers"])
        body = base64.b64decode(entry["body"])
        return Response(request.url, entry["status"], headers, body, request)

    def store(self, request: Request, response: Response) -> None:
        """Keep ``response`` (atomically: a killed run leaves no half entry)."""
        if response.status in NOT_STORED:
            return
        entry: dict[str, Any] = {
            "url": request.url,
            "method": request.method,
            "status": response.status,
            "headers": list(response.headers.items()),
            "body": base64.b64encode(response.body).decode(),
            "stored": time.time(),
        }
        path = self._path(request)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entry, handle)
            os.replace(temporary, path)
        except OSError as exc:  # a full disk costs the cache, never the crawl
            log.warning("http_cache_store_failed", path=str(path), error=str(exc))
            return
        self.stored += 1


class _Cached:
    """A download handler behind the cache (for robots.txt)."""

    def __init__(self, cache: HttpCache, handler: DownloadHandler) -> None:
        self.cache = cache
        self.handler = handler

    async def fetch(self, request: Request) -> Response:
        cached = self.cache.lookup(request)
        if cached is not None:
            return cached
        response = await self.handler.fetch(request)
        self.cache.store(request, response)
        return response
