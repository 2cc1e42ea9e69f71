"""What each reference crawl is: its spider, its arguments, and how its items compare.

Shared by the tests (netdisco runs them) and ``regenerate.py`` (Scrapy runs them), so
that both crawl the same way. Items are compared as sorted JSON lines with the site's
address written ``SITE`` (each run serves the site on a port of its own).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPIDERS = HERE / "spiders"
PROJECT = HERE / "bookproj"
EXPECTED = HERE / "expected"


@dataclass(frozen=True)
class Run:
    """One reference crawl: a spider file's class, or a spider of the project by name."""

    name: str
    spider: str  # FILE.py:Class under spiders/, or a name in bookproj
    args: dict[str, str] = field(default_factory=dict)
    #: start_requests only: Scrapy 2.19 no longer calls it (it calls ``start``), so its
    #: items are Scrapy 2.12's, the last release that runs such a spider as written
    legacy: bool = False

    @property
    def in_project(self) -> bool:
        return ":" not in self.spider

    @property
    def expected(self) -> Path:
        return EXPECTED / f"{self.name}.jsonl"


RUNS = [
    Run("quotes", "quotes.py:QuotesSpider"),
    Run("quotes_tag", "quotes.py:QuotesSpider", {"tag": "life"}),
    Run("api", "api.py:ApiSpider", legacy=True),
    Run("login", "login.py:LoginSpider"),
    Run("bookscrawl", "bookscrawl.py:BooksCrawlSpider"),
    Run("books", "books"),
]


def normalised(text: str, site: str) -> list[str]:
    """JSON lines as sorted canonical lines, the site's address written ``SITE``."""
    lines = [json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False)
             for line in text.splitlines() if line.strip()]  # fmt: skip
    return sorted(line.replace(site, "SITE") for line in lines)
