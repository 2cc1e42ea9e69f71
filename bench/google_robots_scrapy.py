"""Scrapy's robots.txt answers on Google's robotstxt cases (tests/data/google_robotstxt_cases.json).

Scrapy's ``RobotsTxtMiddleware`` (its default ``ProtegoRobotParser``) asks protego
directly: ``Protego.parse(text).can_fetch(url, user_agent)`` with the whole
User-Agent header; for these cases the agent is the case's, as Google passes it.
Only protego is imported, so either venv runs it::

    /tmp/scrapyvenv/bin/python bench/google_robots_scrapy.py
    .venv/bin/python bench/google_robots_scrapy.py

netdisco's rate on the same data is tests/netdisco/test_robots_google.py's.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

from protego import Protego

DATA = Path(__file__).parent.parent / "tests" / "data" / "google_robotstxt_cases.json"


def main() -> None:
    cases = json.loads(DATA.read_text(encoding="utf-8"))["cases"]
    failed = [
        case
        for case in cases
        if bool(Protego.parse(case["robotstxt"]).can_fetch(case["url"], case["useragent"]))
        != case["allowed"]
    ]
    passed = len(cases) - len(failed)
    rate = f"{passed}/{len(cases)} = {100 * passed / len(cases):.1f} %"
    print(f"protego {version('protego')} as Scrapy: {rate}")
    for case in failed:
        print(f"  {case['id']} (robots_test.cc:{case['line']}): expected allowed={case['allowed']}")


if __name__ == "__main__":
    main()
