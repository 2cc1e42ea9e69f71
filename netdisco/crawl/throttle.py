"""How long each host waits between starts, and how many requests it takes at once.

A host's delay is the largest of: ``download_delay`` (or its row in the ``hosts``
table), its robots.txt ``Crawl-delay`` (capped by ``max_crawl_delay``) and, with
``autothrottle``, a delay that follows the host's latency as Scrapy's AutoThrottle
does: ``latency / autothrottle_target_concurrency``, averaged with the delay before,
so that about that many requests are in flight at the server; only a 200 may lower
it. A 429 or 503 that says how long to wait (``Retry-After``) is taken at its word: the
host rests that long (``crawl.hosts``) and its delay is not touched,
so the crawl goes on at its pace once the server said it may. One that does not say
doubles the delay (up to ``autothrottle_max_delay``), again with each one in a row, and
the next healthy answers bring it back down towards what the latency asks.

This module owns the *length* of a host's delay; *when* the next request may start
is ``crawl.hosts``' ``HostSlot`` (in the host's owner, in a shared crawl), which also
rests the whole host after a 429, a 503 or a failure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ada_url import URL

from netdisco.crawl.lru import LRU
from netdisco.crawl.urls import check_url
from netdisco.exceptions import ConfigError
from netdisco.values import parse_table

if TYPE_CHECKING:
    from netdisco.crawl.settings import Settings

#: bounds of a ``hosts`` row (a request body may set them)
MAX_HOST_RULES = 10_000
MAX_HOST_DELAY = 86_400.0
MAX_HOST_CONCURRENCY = 10_000
#: statuses by which a server asks a client to slow down
SLOW_DOWN = frozenset({429, 503})


@dataclass(frozen=True)
class HostRule:
    """A host's own politeness (a row of ``hosts``); None: the crawl's setting."""

    host: str
    download_delay: float | None = None
    per_host_concurrency: int | None = None


def parse_hosts(key: str, value: Any) -> tuple[HostRule, ...]:
    """The ``hosts`` setting: a table of host -> options (or its JSON text), or rules."""
    if isinstance(value, tuple | list) and all(isinstance(v, HostRule) for v in value):
        return tuple(value)
    value = parse_table(key, value, "host -> options")
    if len(value) > MAX_HOST_RULES:
        raise ConfigError(key, f"at most {MAX_HOST_RULES:,} hosts, got {len(value):,}")
    rules = [_rule(f"{key}.{name}", name, options) for name, options in value.items()]
    if len({rule.host for rule in rules}) < len(rules):
        raise ConfigError(key, "a host is named twice (names are compared as URLs spell them)")
    return tuple(rules)


def _rule(key: str, name: Any, options: Any) -> HostRule:
    if not isinstance(options, Mapping):
        raise ConfigError(key, f"expected a table of options, got {options!r}")
    unknown = set(options) - {"download_delay", "per_host_concurrency"}
    if unknown:
        raise ConfigError(key, f"unknown options {sorted(map(str, unknown))}")
    delay = options.get("download_delay")
    if delay is not None and not _number(delay, float, 0, MAX_HOST_DELAY):
        raise ConfigError(f"{key}.download_delay", f"expected 0 to {MAX_HOST_DELAY:g} s")
    slots = options.get("per_host_concurrency")
    if slots is not None and not _number(slots, int, 1, MAX_HOST_CONCURRENCY):
        raise ConfigError(f"{key}.per_host_concurrency", f"expected 1 to {MAX_HOST_CONCURRENCY:,}")
    delay = None if delay is None else float(delay)
    return HostRule(host_key(key, name), delay, slots)


def _number(value: Any, kind: type, low: float, high: float) -> bool:
    """A number (an int where ``kind`` is int; never a bool) from ``low`` to ``high``."""
    kinds = int if kind is int else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


def host_key(key: str, name: Any) -> str:
    """``name`` as requests' host keys spell it (``example.org``, ``127.0.0.2:8080``,
    IDNA, lower case), or a ConfigError: a host and an optional port, nothing else."""
    text = name if isinstance(name, str) else ""
    problem = f"expected a host name with an optional port, got {name!r}"
    if not text or len(text) > 300 or any(c in text for c in "/?#@\\ "):
        raise ConfigError(key, problem)
    try:
        parsed = URL(f"http://{text}/")
    except ValueError:
        raise ConfigError(key, problem) from None
    if check_url(parsed.href)[0] is not None:
        raise ConfigError(key, problem)
    port = f":{parsed.port}" if parsed.port else ""
    return str(parsed.hostname).rstrip(".") + port


class _Pace:
    """What one host taught us: its adaptive delay and its robots.txt Crawl-delay."""

    __slots__ = ("adaptive", "crawl_delay")

    def __init__(self, adaptive: float) -> None:
        self.adaptive = adaptive
        self.crawl_delay = 0.0


class Throttle:
    """Each host's delay and concurrency (module docstring), for ``settings``."""

    def __init__(self, settings: Settings) -> None:
        s = settings
        self.enabled = s.autothrottle
        self.base_delay = s.download_delay
        self.base_slots = s.per_host_concurrency
        self.target = s.autothrottle_target_concurrency
        self.max_delay = s.autothrottle_max_delay
        self.start_delay = max(s.autothrottle_start_delay, s.download_delay)
        self.max_crawl_delay = s.max_crawl_delay if s.obey_robots else 0.0
        self.rules = {rule.host: rule for rule in s.hosts}
        self._paces: LRU[str, _Pace] = LRU(s.host_cache_size)

    def delay(self, host: str) -> float:
        """Seconds between two starts to ``host`` (a netloc) now."""
        base = self._rule_delay(host) if self.rules else self.base_delay
        pace = self._paces.peek(host) if len(self._paces) else None
        if pace is None:
            return self.start_delay if self.enabled else base
        return max(base, pace.crawl_delay, pace.adaptive)

    def concurrency(self, host: str) -> int:
        """Requests ``host`` may have in flight (its ``hosts`` row, else the setting)."""
        rule = self._rule(host) if self.rules else None
        if rule is None or rule.per_host_concurrency is None:
            return self.base_slots
        return rule.per_host_concurrency

    def crawl_delay(self, host: str, seconds: float | None) -> None:
        """robots.txt asked for ``seconds`` between requests: obeyed up to the cap; a
        value that is no number of seconds (negative, NaN) is ignored."""
        if seconds is None or not self.max_crawl_delay or not seconds > 0:
            return
        wanted = min(seconds, self.max_crawl_delay)
        pace = self._pace(host)
        if pace.crawl_delay != wanted:
            pace.crawl_delay = wanted

    def observe(self, host: str, latency: float, status: int, told: bool = False) -> None:
        """A response came after ``latency`` s: Scrapy's AutoThrottle step. ``told``: a
        429/503 said how long to wait (Retry-After), which the host's rest honours."""
        if not self.enabled or not math.isfinite(latency) or latency < 0:
            return
        if status in SLOW_DOWN:
            if not told:
                self.slowed(host)
            return
        pace = self._pace(host)
        target = latency / self.target
        new = max(target, (pace.adaptive + target) / 2)
        new = min(max(self._rule_delay(host), new), self.max_delay)
        if status == 200 or new > pace.adaptive:  # a quick error page must not speed us up
            pace.adaptive = new

    def slowed(self, host: str) -> None:
        """The host asked us to slow down (429, 503): double its adaptive delay."""
        if self.enabled:
            pace = self._pace(host)
            pace.adaptive = min(max(pace.adaptive * 2, self.start_delay), self.max_delay)

    def _pace(self, host: str) -> _Pace:
        pace = self._paces.get(host)
        if pace is None:
            start = self.start_delay if self.enabled else 0.0
            pace = self._paces.put(host, _Pace(start))
        return pace

    def _rule_delay(self, host: str) -> float:
        rule = self._rule(host) if self.rules else None
        if rule is None or rule.download_delay is None:
            return self.base_delay
        return rule.download_delay

    def _rule(self, host: str) -> HostRule | None:
        """The row for ``host`` with its port, else for its name on any port."""
        rule = self.rules.get(host)
        if rule is None and host.rfind(":") > host.rfind("]"):
            rule = self.rules.get(host.rpartition(":")[0])
        return rule
