"""What came back: a ``Response`` with charset-aware text and parsel selectors."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from parsel import Selector, SelectorList

from netdisco.crawl.encoding import sniff
from netdisco.crawl.request import Callback, Request
from netdisco.crawl.urls import resolve


class Response:
    """A downloaded page. ``text`` and the selector are built lazily, once."""

    __slots__ = (
        "__weakref__",  # itemloaders and Scrapy's helpers key caches by response
        "_base",
        "_selector",
        "_text",
        "body",
        "encoding",
        "encoding_reason",
        "headers",
        "request",
        "status",
        "url",
    )

    def __init__(
        self, url: str, status: int, headers: Mapping[str, str], body: bytes, request: Request
    ) -> None:
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body
        self.request = request
        self.encoding: str | None = None  # the WHATWG name, once ``text`` was read
        self.encoding_reason: str | None = None  # bom, header, meta, detected or default
        self._text: str | None = None
        self._selector: Selector | None = None
        self._base: str | None = None

    def __repr__(self) -> str:
        return f"<Response {self.status} {self.url}>"

    @property
    def meta(self) -> dict[str, Any]:
        """The request's meta, as in Scrapy."""
        return self.request.meta

    @property
    def text(self) -> str:
        """The body decoded as a browser decodes it (the HTML Standard's encoding
        sniffing: BOM, header charset, ``<meta>``, detection, windows-1252)."""
        if self._text is None:
            sniffed = sniff(self.body, self.headers.get("Content-Type", ""))
            self.encoding, self.encoding_reason = sniffed.encoding.name, sniffed.reason
            self._text = sniffed.decode(self.body)
        return self._text

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` if it is not), as in Scrapy."""
        return json.loads(self.text)

    @property
    def selector(self) -> Selector:
        """The parsel selector over ``text`` (built on first use)."""
        if self._selector is None:
            self._selector = Selector(text=self.text, type="html")
        return self._selector

    def css(self, query: str) -> SelectorList[Selector]:
        """``selector.css(query)``."""
        return self.selector.css(query)

    def xpath(self, query: str, **namespaces: Any) -> SelectorList[Selector]:
        """``selector.xpath(query)``."""
        return self.selector.xpath(query, **namespaces)

    @property
    def base_url(self) -> str:
        """What the page's links are relative to, as the HTML Standard says: the first
        ``<base>`` with an ``href``, resolved against the page's URL, or that URL."""
        if self._base is None:
            self._base = self.url
            if _BASE_TAG.search(self.body):  # most pages have none: no parse for them
                hrefs = self.selector.xpath("(//base[@href])[1]/@href").getall()
                if hrefs:
                    with contextlib.suppress(ValueError):  # unparsable: the page's URL
                        self._base = resolve(self.url, hrefs[0])
        return self._base

    def urljoin(self, url: str) -> str:
        """Resolve ``url`` as a browser does: against ``base_url``, by the URL Standard
        (ValueError if it does not parse)."""
        return resolve(self.base_url, url)

    def follow(
        self, url: str | Selector, callback: Callback | None = None, **kwargs: Any
    ) -> Request:
        """A request for ``url`` (a string or an ``<a>``/``<link>`` selector), one level deeper.

        Invalid URLs (``mailto:``, garbage) still make a request: the scheduler rejects and
        counts them, so one bad link never hides the page's other links.
        """
        if isinstance(url, Selector):
            url = _href(url)
        try:
            absolute = self.urljoin(url)
        except ValueError:  # unparsable (``http://[oops``): the scheduler says why
            absolute = url
        return Request(absolute, callback=callback, depth=self.request.depth + 1, **kwargs)

    def follow_all(
        self,
        urls: Iterable[str | Selector] | None = None,
        callback: Callback | None = None,
        *,
        css: str | None = None,
        xpath: str | None = None,
        **kwargs: Any,
    ) -> list[Request]:
        """Requests for ``urls``, or for the links matched by ``css``/``xpath``.

        Elements without an href or src (``<a name="top">``) are skipped, as in Scrapy.
        """
        if urls is None:
            if css is not None:
                urls = self.css(css)
            elif xpath is not None:
                urls = self.xpath(xpath)
            else:
                raise ValueError("follow_all needs urls, css or xpath")
        return [self.follow(u, callback, **kwargs) for u in urls if _has_link(u)]


#: a body that may hold a ``<base>`` element
_BASE_TAG = re.compile(rb"<base", re.IGNORECASE)


def _has_link(url: str | Selector) -> bool:
    if not isinstance(url, Selector) or isinstance(url.root, str):
        return True
    # the element's own lookup, not parsel's ``attrib``: that copies every attribute, and
    # lxml refuses to name one whose name holds a control character (``<a \x01>``)
    return url.root.get("href") is not None or url.root.get("src") is not None


def _href(selector: Selector) -> str:
    """The link a selector points at: its text if it is an attribute, else its href/src."""
    root = selector.root
    if isinstance(root, str):
        return root
    for attribute in ("href", "src"):
        value = root.get(attribute)
        if value is not None:
            return str(value)
    raise ValueError(f"selector {selector!r} has no href or src")
