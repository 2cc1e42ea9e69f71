"""The ``frontier = "redis://..."`` setting: where the frontier lives, how it behaves.

``redis+cluster://host:port,host:port/0`` (or ``rediss+cluster://`` for TLS) names a
Redis Cluster by a few of its nodes; ``connect`` gives the client either names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis import asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import SlotNotCoveredError

from netdisco.exceptions import ConfigError, FrontierFailed
from netdisco.frontiers.redis.leases import DEFAULT_PREFIX, Client

#: URL schemes of a Redis Cluster (the rest are redis-py's own)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: host-queue shards (hash tags) on a cluster unless ``shards`` says otherwise
CLUSTER_SHARDS = 16

#: what Redis (or a cluster in a failover) answers while it cannot serve yet: wait, retry.
#: A cluster client that ran out of redirections, or wrote to a master just demoted,
#: meets a topology that is still changing, not a refusal.
_TRANSIENT = (
    rx.ConnectionError,
    rx.TimeoutError,
    rx.ClusterError,
    rx.AskError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    SlotNotCoveredError,
)

_OPTIONS = (
    "prefix",
    "lease_ttl",
    "seen",
    "bloom_capacity",
    "bloom_error",
    "prefetch",
    "politeness",
    "trace",
    "shards",
    "replicas",
    "wait",
)


@dataclass(frozen=True, kw_only=True)
class RedisOptions:
    """Where the frontier lives and how it behaves; parsed from the ``frontier`` URL."""

    url: str
    prefix: str = DEFAULT_PREFIX
    lease_ttl: float = 30.0
    seen: str = "exact"
    bloom_capacity: int = 10_000_000
    bloom_error: float = 0.001
    #: requests a take leases at least (host queues: one for each worker waiting, if more)
    prefetch: int = 4
    #: ``cluster``: host queues in Redis hold per-host limits for every engine together
    #: (``netdisco.frontiers.redis.hosts``); ``engine``: one queue, each engine polite alone
    politeness: str = "cluster"
    #: log every host slot taken and released to a Redis list (tests, debugging)
    trace: bool = False
    #: hash tags the host queues are spread over (one slot each on a cluster)
    shards: int = 1
    #: replicas an add must reach (``WAIT``) before the page that found the links is
    #: acknowledged, so that a failover cannot lose them; on a cluster, at most as many
    #: as the slot has
    replicas: int = 0
    #: which writes wait for them: ``all`` (adds and takes: nothing is lost, and a failover
    #: cannot hand a request or a host's slot out twice), or ``adds`` only (faster)
    wait: str = "all"

    @classmethod
    def from_url(cls, url: str) -> RedisOptions:
        """Our options come from the query string; the rest goes to redis-py."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _OPTIONS}
        rest = urlencode([(k, v) for k, v in query if k not in _OPTIONS])
        try:
            options = cls(
                url=urlunsplit(parts._replace(query=rest)),
                prefix=ours.get("prefix", DEFAULT_PREFIX),
                lease_ttl=float(ours.get("lease_ttl", cls.lease_ttl)),
                seen=ours.get("seen", cls.seen),
                bloom_capacity=int(ours.get("bloom_capacity", cls.bloom_capacity)),
                bloom_error=float(ours.get("bloom_error", cls.bloom_error)),
                prefetch=int(ours.get("prefetch", cls.prefetch)),
                politeness=ours.get("politeness", cls.politeness),
                trace=_flag(ours.get("trace", "0")),
                shards=int(ours.get("shards", _default_shards(url, ours))),
                replicas=int(ours.get("replicas", 1 if _is_cluster(url) else 0)),
                wait=ours.get("wait", cls.wait),
            )
        except ValueError as exc:
            raise ConfigError("frontier", f"bad option in {redact(url)}: {exc}") from None
        options.check()
        return options

    def check(self) -> None:
        """Fail at start, naming the option, rather than half-way through a crawl."""
        problems = {
            "lease_ttl": None if self.lease_ttl >= 1 else "must be at least 1 second",
            "seen": None if self.seen in ("exact", "bloom") else "must be exact or bloom",
            "bloom_capacity": None if self.bloom_capacity > 0 else "must be positive",
            "bloom_error": None if 0 < self.bloom_error < 1 else "must be between 0 and 1",
            "prefix": None if self.prefix and "{" not in self.prefix else "must be non-empty",
            "prefetch": None if 1 <= self.prefetch <= 1000 else "must be from 1 to 1000",
            "politeness": None
            if self.politeness in ("cluster", "engine")
            else "must be cluster or engine",
            "shards": None
            if 1 <= self.shards <= 1024 and (self.shards == 1 or self.politeness == "cluster")
            else "must be from 1 to 1024, and 1 with politeness=engine",
            "replicas": None if 0 <= self.replicas <= 16 else "must be from 0 to 16",
            "wait": None if self.wait in ("adds", "all") else "must be adds or all",
        }
        for name, problem in problems.items():
            if problem is not None:
                raise ConfigError("frontier", f"option {name} {problem} ({redact(self.url)})")
        if _is_cluster(self.url):
            cluster_seeds(self.url)

    def bloom_size(self) -> tuple[int, int]:
        """``(bits, hashes)`` for the capacity and error rate (at most 2**32 bits)."""
        bits = math.ceil(-self.bloom_capacity * math.log(self.bloom_error) / math.log(2) ** 2)
        bits = min(bits, 2**32)
        return bits, max(1, round(bits / self.bloom_capacity * math.log(2)))


def _is_cluster(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def _default_shards(url: str, ours: dict[str, str]) -> int:
    """Host queues spread over a cluster's masters; one queue (``politeness=engine``) cannot."""
    sharded = _is_cluster(url) and ours.get("politeness", "cluster") == "cluster"
    return CLUSTER_SHARDS if sharded else 1


def cluster_seeds(url: str) -> list[tuple[str, int]]:
    """The ``host:port`` nodes a ``redis+cluster://`` URL names; ``ConfigError`` names the
    bad part (a cluster has one database, 0)."""
    parts = urlsplit(url)
    where = f"in {redact(url)}"
    if parts.path not in ("", "/", "/0"):
        raise ConfigError("frontier", f"database {parts.path!r} {where}: a cluster has only 0")
    seeds = []
    for seed in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = seed.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("frontier", f"node {seed!r} {where} is not host:port")
        seeds.append((host.strip("[]"), int(port)))
    return seeds


def connect(url: str, **kwargs: Any) -> Client:
    """A client for ``url`` (``RedisOptions.url``): a cluster's, or redis-py's ``from_url``.

    RESP2 everywhere: it works with every Redis 5+ server.
    """
    if not _is_cluster(url):
        return aioredis.Redis.from_url(url, protocol=2, **kwargs)
    parts = urlsplit(url)
    nodes = [ClusterNode(host, port) for host, port in cluster_seeds(url)]
    password = None if parts.password is None else unquote(parts.password)
    username = None if parts.username is None else unquote(parts.username) or None
    tls = parts.scheme.startswith("rediss")
    return RedisCluster(
        startup_nodes=nodes, username=username, password=password, ssl=tls, protocol=2, **kwargs
    )


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(f"a flag is 0 or 1, not {text!r}")
    return text == "1"


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def bloom_offsets(fingerprint: bytes, bits: int, hashes: int) -> str:
    """Double hashing over the (already uniform) 16-byte fingerprint."""
    first = int.from_bytes(fingerprint[:8], "big")
    step = int.from_bytes(fingerprint[8:16], "big") | 1
    return " ".join(str((first + i * step) % bits) for i in range(hashes))


def refusal(exc: Exception, url: str) -> FrontierFailed | None:
    """None when ``exc`` says Redis cannot serve yet (``_TRANSIENT``: wait, retry); else
    the crawl's failure: Redis refuses (out of memory, no permission), and a crawl that
    went on would count the page failed and acknowledge it without its links."""
    if isinstance(exc, _TRANSIENT):
        return None
    return FrontierFailed(f"Redis at {redact(url)} refused the crawl: {exc}")
