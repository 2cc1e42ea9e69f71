"""Scrapy on the cases netdisco is tested on (tests/wpt_urls.py): WPT's urltestdata.json
through ``HtmlResponse.follow``, without and with a ``<base>``.

Run in a venv of its own (Scrapy is no dependency of netdisco)::

    python3 -m venv /tmp/scrapyvenv && /tmp/scrapyvenv/bin/pip install scrapy
    PYTHONPATH=. /tmp/scrapyvenv/bin/python bench/wpt_urls_scrapy.py

A case the standard calls a failure passes when Scrapy refuses to make the request.
"""

from __future__ import annotations

import scrapy
from scrapy.http import HtmlResponse

from tests.wpt_urls import rate


def scrapy_follow(url: str, body: bytes | None, link: str) -> str | None:
    """The URL Scrapy would request for ``link`` on a page (None: it refuses)."""
    try:
        response = HtmlResponse(url, body=body or b"", encoding="utf-8")
        if body is None:
            return str(response.follow(link).url)
        return str(response.follow(response.css("a")[0]).url)
    except Exception:  # any refusal is Scrapy's "failure"
        return None


if __name__ == "__main__":
    for with_base in (False, True):
        passed, applicable = rate(scrapy_follow, with_base=with_base)
        print(
            f"scrapy {scrapy.__version__} with_base={with_base}: {passed}/{applicable}"
            f" = {100 * passed / applicable:.1f} %"
        )
