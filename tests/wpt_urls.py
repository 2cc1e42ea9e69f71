"""WPT's urltestdata.json through a crawler's link resolution (``follow``), without
and with a ``<base>`` element: the cases, the page each one makes, the verdict.

Pure Python and nothing of netdisco, so that the same cases measure Scrapy
(``bench/wpt_urls_scrapy.py``, run in a venv of its own).
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data" / "urltestdata.json"
#: the page's own URL when the case's base is given by a ``<base>`` element
DOCUMENT_URL = "http://document.test/dir/page.html"


@dataclass(frozen=True)
class Case:
    """One test: ``href`` None means the standard says the URL fails to parse."""

    input: str
    base: str
    href: str | None


def cases(path: Path = DATA) -> Iterator[Case]:
    """The cases that have a base (a link always has one: the page it is on)."""
    for entry in json.loads(path.read_text(encoding="utf-8")):
        if isinstance(entry, dict) and entry.get("base") is not None:
            yield Case(entry["input"], entry["base"], entry.get("href"))


def page_with_base(case: Case) -> bytes:
    """An HTML page whose ``<base>`` is the case's base and whose one link is its input."""
    base, link = html.escape(case.base, quote=True), html.escape(case.input, quote=True)
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><base href="{base}"></head>'
        f'<body><a href="{link}">link</a></body></html>'
    ).encode()


#: a crawler's ``follow``: (page URL, page body or None for no base, link) -> URL or None
Follow = Callable[[str, bytes | None, str], str | None]


def verdicts(follow: Follow, *, with_base: bool) -> Iterator[tuple[Case, bool, str | None]]:
    """``(case, passed, got)``: got is the URL the crawler would request (None: none)."""
    for case in cases():
        if with_base:
            got = follow(DOCUMENT_URL, page_with_base(case), case.input)
        else:
            got = follow(case.base, None, case.input)
        yield case, got == case.href, got


def rate(follow: Follow, *, with_base: bool) -> tuple[int, int]:
    """``(passed, applicable)`` over the cases."""
    results = [passed for _, passed, _ in verdicts(follow, with_base=with_base)]
    return sum(results), len(results)
