"""Google's robotstxt test cases (``robots_test.cc``, see tests/data/README.md) through
netdisco's robots layer as the crawl asks it: the product token of the user agent
(``product_token``, as ``robots_agent`` takes it), the text read by ``parse_robots``
(BOM strip, user-agent lines rewritten for whole product-token matching), and
protego's ``can_fetch(url, token)``, as ``RobotsCache.allowed`` does.

A case outside ``KNOWN_DIFFERENCES`` that fails, or a listed one that passes, fails
the suite, so the list stays true. Protego as Scrapy uses it, on the same data:
``bench/google_robots_scrapy.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from netdisco.crawl.robots import parse_robots, product_token

DATA = Path(__file__).parent.parent / "data" / "google_robotstxt_cases.json"
CASES: list[dict[str, Any]] = json.loads(DATA.read_text(encoding="utf-8"))["cases"]

#: the cases netdisco answers otherwise than Google, and why (ids: test#n, in order)
KNOWN_DIFFERENCES = {
    "ID_LineSyntax_Groups_OtherRules#3": "protego ends a group's user-agent lines at an "
    "unknown line, so FooBot's group is empty (all allowed), not sharing *'s Disallow: /",
    "GoogleOnly_AcceptUserAgentUpToFirstSpace#2": "netdisco matches by its user agent's "
    "product token (foo of 'Foo Bar'); Google matches 'Foo Bar' whole, which no group names",
    "ID_Encoding#3": "protego percent-encodes the URL's raw ツ before matching; Google "
    "matches the raw octets (the crawl's URLs are percent-encoded already)",
    "ID_Encoding#5": "protego percent-encodes the URL's raw ツ before matching; Google "
    "matches the raw octets (the crawl's URLs are percent-encoded already)",
    "ID_Encoding#6": "protego decodes the rule's %62%61%7A (unreserved) to baz; Google "
    "compares octets, so /foo/bar/baz does not match",
    "GoogleOnly_LineTooLong#2": "Google-only: lines are cut at 8 * 2083 bytes; protego "
    "reads the whole line, so the cut-off rule does not match",
    "GoogleOnly_LineTooLong#5": "Google-only: lines are cut at 8 * 2083 bytes; protego "
    "reads the whole line, so the cut-off rule does not match",
}
#: cases answered as Google does, measured (138 of 145, 95.2 %); a regression fails
MEASURED_PASSED = 138


def netdisco_allows(case: dict[str, Any]) -> bool:
    """The crawl's answer for the case: its agent is ``case["useragent"]``'s token."""
    agent = product_token(case["useragent"])
    return bool(parse_robots(case["robotstxt"], agent).can_fetch(case["url"], agent))


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case(case: dict[str, Any]) -> None:
    agrees = netdisco_allows(case) == case["allowed"]
    if case["id"] in KNOWN_DIFFERENCES:
        assert not agrees, f"listed in KNOWN_DIFFERENCES but passes: {case['id']}"
    else:
        assert agrees, f"robots_test.cc:{case['line']} expects allowed={case['allowed']}"


def test_pass_rate() -> None:
    passed = sum(netdisco_allows(case) == case["allowed"] for case in CASES)
    assert len(CASES) == 145
    assert passed >= MEASURED_PASSED
    assert passed == len(CASES) - len(KNOWN_DIFFERENCES)


def test_known_differences_are_cases() -> None:
    assert set(KNOWN_DIFFERENCES) <= {case["id"] for case in CASES}
