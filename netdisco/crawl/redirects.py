"""Redirects, followed by hand (``Downloader._follow``): the next hop of a request.

Each hop is a fresh copy of the spider's request, so the middlewares may change it
freely; credentials stay with the origin that was given them.
"""

from __future__ import annotations

from dataclasses import replace

from netdisco.crawl.request import Request
from netdisco.crawl.urls import resolve
from netdisco.exceptions import InvalidURL, TooManyRedirects

#: how many hops a request made before it was handed to another host's queue
HOPS_KEY = "redirect_times"
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: credentials that must not follow a redirect to another origin (as requests, curl, browsers)
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})


def redirect_request(request: Request, hop: Request, status: int, location: str) -> Request:
    """The next hop of ``request``'s redirects: ``location`` resolved against the hop,
    without fragment, as a fresh copy of the spider's request (301, 302 and 303 turn
    into a GET without body, except for HEAD)."""
    url = defrag(join_location(hop.url, location))
    method, body = hop.method, hop.body
    if status in (301, 302, 303) and method != "HEAD":
        method, body = "GET", None
    return replace(request, url=url, method=method, body=body, headers=dict(request.headers))


def defrag(url: str) -> str:
    """The URL without its fragment (what is fetched, and what ``response.url`` is)."""
    return url.partition("#")[0] if "#" in url else url


def join_location(base: str, location: str) -> str:
    """The absolute redirect target; a Location that cannot be parsed is an InvalidURL."""
    try:
        return resolve(base, location)
    except ValueError as exc:
        raise InvalidURL(f"redirect to {location!r}: {exc}", url=base) from exc


def without_credentials(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` without Authorization, Cookie and Proxy-Authorization."""
    return {k: v for k, v in headers.items() if k.lower() not in CREDENTIAL_HEADERS}


def hand_off(request: Request, hop: Request, hops: int, most: int) -> Request:
    """A hop to a host another engine owns: it goes to the frontier for that engine (the
    crawl admits it), counting the hops so far, so that ``max_redirects`` holds across hosts
    and a loop between two hosts ends (the second visit is also a seen URL)."""
    hops += int(request.meta.get(HOPS_KEY, 0))
    if hops > most:
        raise TooManyRedirects(f"more than {most} redirects", url=request.url)
    hop.meta = {**request.meta, HOPS_KEY: hops}
    return hop
