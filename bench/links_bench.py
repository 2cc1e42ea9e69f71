"""CPU time per link of ``follow_all``, the scheduler's ``check_url`` and ``fingerprint``, and
the downloader's ``origin`` and ``wire_url``, on a page of 1,000 links: what a link costs
between the page and the request line.

    .venv/bin/python bench/links_bench.py              # this checkout
    .venv/bin/python bench/links_bench.py /tmp/before  # another tree's netdisco/

CPU time (``process_time``), best of five, so that a loaded machine skews it less.
"""

from __future__ import annotations

import sys
import time
import timeit

if len(sys.argv) > 1:  # import netdisco from the tree given, not the editable install
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, sys.argv[1])

from netdisco import Request, Response
from netdisco.crawl.scheduler import fingerprint
from netdisco.crawl.urls import check_url, origin, wire_url

LINKS = "".join(
    f'<a href="/cat/{i}/item?id={i}&b=2">x</a><a href="../p{i}.html#f">y</a>' for i in range(500)
)
BODY = f"<html><head><title>t</title></head><body>{LINKS}</body></html>".encode()


def page() -> int:
    url = "http://shop.test/a/b/index.html"
    response = Response(url, 200, {"Content-Type": "text/html"}, BODY, Request(url))
    requests = response.follow_all(css="a")
    for request in requests:
        check_url(request.url)
        fingerprint(request)
        origin(request.url)
        wire_url(request.url)
    return len(requests)


if __name__ == "__main__":
    rounds = 20
    best = min(timeit.Timer(page, timer=time.process_time).repeat(5, rounds))
    print(f"{1e6 * best / rounds / 1000:.1f} us of CPU per link")
