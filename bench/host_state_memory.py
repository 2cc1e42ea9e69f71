"""Memory of the per-host state at its default bounds, measured with tracemalloc.

    .venv/bin/python bench/host_state_memory.py [--hosts 1000000]

Feeds ``--hosts`` distinct hosts to the scope cache and the download slots, and
``robots_cache_size`` parsed robots.txt files (a typical short one) to the robots
cache, then prints what each holds.
"""

from __future__ import annotations

import argparse
import tracemalloc

from protego import Protego

from netdisco.crawl.hosts import HostSlot
from netdisco.crawl.lru import LRU
from netdisco.crawl.robots import _Origin
from netdisco.crawl.scheduler import Scope
from netdisco.crawl.settings import Settings
from netdisco.crawl.throttle import Throttle

ROBOTS = "User-agent: *\nDisallow: /private/\nDisallow: /admin/\nAllow: /public/\nCrawl-delay: 1\n"


def measure(hosts: int) -> dict[str, float]:
    s = Settings()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    scope = Scope(["example.org"], [], [], s.host_cache_size)
    for n in range(hosts):
        scope.reason(f"http://h{n}.links.test/", f"h{n}.links.test")
    after_scope = tracemalloc.get_traced_memory()[0]
    slots: LRU[str, HostSlot] = LRU(s.host_cache_size, HostSlot.idle)
    throttle = Throttle(s)
    for n in range(hosts):
        host = f"h{n}.links.test:80"
        slots.put(host, HostSlot(host, throttle))
    after_slots = tracemalloc.get_traced_memory()[0]
    robots: LRU[str, _Origin] = LRU(s.robots_cache_size, _Origin.idle)
    for n in range(s.robots_cache_size * 2):
        origin = f"http://h{n}.links.test"
        robots.put(origin, _Origin(origin, None, rules=Protego.parse(ROBOTS)))
    after_robots = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    mb = 1024 * 1024
    return {
        "scope_mb": (after_scope - base) / mb,
        "slots_mb": (after_slots - after_scope) / mb,
        "robots_mb": (after_robots - after_slots) / mb,
        "total_mb": (after_robots - base) / mb,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1_000_000)
    for key, value in measure(parser.parse_args().hosts).items():
        print(f"{key}: {value:.1f}")
