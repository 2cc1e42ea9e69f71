"""Helpers for testing code that uses netdisco: real servers on loopback, HTTP, polling.

Only tests (and benchmarks) import this package; no module of netdisco or monitor
does, ``netdisco demo`` included (``tests/test_layers.py`` enforces it).

- servers: ``ZooKeeperServer`` and ``RedisServer`` run Debian's ZooKeeper and
  ``redis-server`` as child processes on free loopback ports, known by pid, that
  can be stopped and restarted on the same data directory (from
  ``netdisco._servers``, which the demo uses too); ``RedisClusterServer`` runs six
  of them as a Redis Cluster (3 masters, 3 replicas) (``cluster``).
- HTTP: ``serve`` an aiohttp app on a free port, ``write_site`` a generated static
  site (``http``), ``get_json`` an endpoint that may not answer yet.
- polling: ``eventually`` a check holds (``netdisco._polling``, shared with the demo).
"""

from netdisco._polling import eventually, get_json, wait_for
from netdisco._servers import (
    ZK_CONF_DIR,
    ZK_JAR,
    RedisServer,
    ServerProcess,
    ZooKeeperServer,
    four_letter,
    free_port,
    redis_ping,
    wait_port,
    zookeeper_mode,
)
from netdisco.testing.cluster import RedisClusterServer
from netdisco.testing.http import serve, write_site

__all__ = [
    "ZK_CONF_DIR",
    "ZK_JAR",
    "RedisClusterServer",
    "RedisServer",
    "ServerProcess",
    "ZooKeeperServer",
    "eventually",
    "four_letter",
    "free_port",
    "get_json",
    "redis_ping",
    "serve",
    "wait_for",
    "wait_port",
    "write_site",
    "zookeeper_mode",
]
