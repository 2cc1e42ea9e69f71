"""What counts as a failed request, and its reason: the one owner of the reason names.

A request ends failed when it came to nothing for a reason worth a look: an error
status not retried (or retried in vain), a network error through every retry, a
body too large, a host given up. Filtered requests (robots.txt, out of scope, a
redirect to a seen page, an invalid URL) are not failures: nothing went wrong.
The failed store (``netdisco.frontiers.failed``) keeps each with its reason:
``http_<status>`` or one of :data:`REASONS`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import structlog

from netdisco.crawl.request import Request
from netdisco.exceptions import (
    DownloadFailed,
    DuplicateRedirect,
    FrontierFailed,
    HostGivenUp,
    HttpStatusError,
    InvalidURL,
    MiddlewareError,
    OutOfScope,
    RenderError,
    RequestError,
    ResponseTooLarge,
    RobotsDenied,
    TooManyRedirects,
    TransferFailed,
    TransferTimeout,
    UnexpectedNotModified,
)
from netdisco.frontiers.base import Frontier
from netdisco.frontiers.failed import FailedPage, FailedRecord

log = structlog.get_logger(__name__)

#: every reason that is not an HTTP status, in the order a listing explains them
REASONS = (
    "timeout",
    "dns",
    "tls",
    "connection",
    "transfer",
    "too_large",
    "too_many_redirects",
    "host_given_up",
    "middleware",
    "render",
    "not_modified",
    "error",
)

#: filtered, not failed: never kept
_NOT_FAILURES = (RobotsDenied, OutOfScope, DuplicateRedirect, InvalidURL)
_BY_CLASS: tuple[tuple[type[RequestError], str], ...] = (
    (ResponseTooLarge, "too_large"),
    (TooManyRedirects, "too_many_redirects"),
    (HostGivenUp, "host_given_up"),
    (MiddlewareError, "middleware"),
    (RenderError, "render"),
    (UnexpectedNotModified, "not_modified"),
)
#: the transport's error classes (aiohttp's, the standard library's), by reason
_DNS = frozenset({"ClientConnectorDNSError", "gaierror"})
_TLS = frozenset({"ClientSSLError", "SSLError", "ClientConnectorCertificateError"})


def failure_reason(exc: RequestError) -> str | None:
    """The reason ``exc`` is kept under, or None when it is not a failure."""
    if isinstance(exc, _NOT_FAILURES):
        return None
    if isinstance(exc, HttpStatusError):
        return f"http_{exc.status}"
    for cls, reason in _BY_CLASS:
        if isinstance(exc, cls):
            return reason
    cause = exc.__cause__ if isinstance(exc, DownloadFailed) else exc
    if isinstance(cause, TransferFailed):
        return _transfer_reason(cause)
    return "error"


def _transfer_reason(exc: TransferFailed) -> str:
    if isinstance(exc, TransferTimeout) or isinstance(exc.__cause__, TimeoutError):
        return "timeout"
    names = {cls.__name__ for cls in type(exc.__cause__ or exc).__mro__}
    if names & _DNS:
        return "dns"
    if names & _TLS:
        return "tls"
    if names & {"ClientConnectorError", "ConnectionError", "ServerDisconnectedError"}:
        return "connection"
    return "transfer"


def failed_record(request: Request, exc: RequestError, reason: str) -> FailedRecord:
    """What the failed store keeps of ``request``."""
    return FailedRecord(
        id=request.fingerprint.hex(),
        url=request.url,
        method=request.method,
        reason=reason,
        status=exc.status if isinstance(exc, HttpStatusError) else None,
        error=type(exc.__cause__ or exc).__name__,
        message=str(exc),
        attempts=request.attempts,
        last_at=round(time.time(), 3),
    )


class FailedRequests:
    """A crawl's failed requests: kept in its frontier as they fail, counted by reason,
    listed, queued again or forgotten (``GET/POST/DELETE .../failed``)."""

    def __init__(self, frontier: Frontier[Request], keep: int) -> None:
        self.frontier = frontier
        self.keep = keep
        #: how many the store held when last asked (the znode's ``failed``)
        self.kept = 0
        #: failures of this run on this engine, by reason (``/metrics``)
        self.by_reason: dict[str, int] = {}

    async def record(self, request: Request, exc: RequestError) -> None:
        """Keep ``request`` if ``exc`` is a failure; a store that cannot keep it costs a
        log line, never the crawl (a broken ``state_dir`` ends it anyway)."""
        reason = failure_reason(exc)
        if reason is None:
            return
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        if self.keep <= 0:
            return
        try:
            record = failed_record(request, exc, reason)
            self.kept = await self.frontier.keep_failed(request, record, self.keep)
        except FrontierFailed:
            raise
        except Exception as error:
            log.warning("failed_request_not_kept", url=request.url, error=repr(error))

    async def page(self, reason: str | None, offset: int, limit: int) -> FailedPage:
        """A listing, oldest first."""
        page = await self.frontier.failed(reason, offset, limit)
        self.kept = sum(page.by_reason.values())
        return page

    async def retry(self, reason: str | None, ids: Sequence[str] | None) -> int:
        """Queue the selected requests again, attempts reset, past the seen set."""
        requests = await self.frontier.take_failed(reason, ids)
        for request in requests:
            request.attempts = 0
            request.dont_filter = True  # it was seen: that is how it came to fail
        if requests:
            await self.frontier.add(requests)
        self.kept = max(self.kept - len(requests), 0)
        return len(requests)

    async def delete(self, reason: str | None) -> int:
        """Forget the failures of ``reason`` (all without one)."""
        deleted = await self.frontier.delete_failed(reason)
        self.kept = max(self.kept - deleted, 0)
        return deleted
