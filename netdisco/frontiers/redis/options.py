"""The ``frontier = "redis://..."`` setting: where the frontier lives, how it behaves.

``redis+cluster://host:port,host:port/0`` (or ``rediss+cluster://`` for TLS) names a
Redis Cluster by a few of its nodes; ``connect`` gives the client either names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from redis import asyncio as aioredis
from redis import exceptions as rx
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import SlotNotCoveredError

from netdisco.exceptions import ConfigError, FrontierFailed
from netdisco.frontiers.redis.leases import DEFAULT_PREFIX, Client
from netdisco.schema import Section, Source, load, loadable, setting

#: URL schemes of a Redis Cluster (the rest are redis-py's own)
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

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


def _flag(key: str, text: Any) -> bool:
    if text not in ("0", "1"):
        raise ConfigError(key, f"a flag is 0 or 1, not {text!r}")
    return bool(text == "1")


def _option(default: Any, doc: str, problem: str, ok: Any, **more: Any) -> Any:
    """A query-string option; ``ok(value)`` says whether it is fine, ``problem`` why not."""
    check = lambda value: None if ok(value) else problem  # noqa: E731
    return setting(default, section="frontier URL", doc=doc, check=check, **more)


@dataclass(frozen=True, kw_only=True)
class RedisOptions(Section):
    """Where the frontier lives and how it behaves; parsed from the ``frontier`` URL."""

    url: str = setting(
        doc="the redis-py URL, without our options", section="frontier URL", loaded=False
    )
    prefix: str = _option(
        DEFAULT_PREFIX,
        "key prefix of every key the crawl writes",
        "must be non-empty",
        lambda p: p and "{" not in p,
    )
    lease_ttl: float = _option(
        30.0, "seconds a taken request stays leased", "must be at least 1 second", lambda t: t >= 1
    )
    seen: str = _option(
        "exact",
        "exact (a set) or bloom (a Bloom filter) seen-URLs",
        "must be exact or bloom",
        lambda s: s in ("exact", "bloom"),
    )
    bloom_capacity: int = _option(
        1_000_000,
        "URLs the Bloom filter's first stage holds (owned hosts: over all their buckets' "
        "filters); each next stage, added when the last is full, holds twice as many",
        "must be from 1000 to 1000000000",
        lambda c: 1000 <= c <= 1_000_000_000,
    )
    bloom_error: float = _option(
        0.001,
        "the false-positive rate of the whole filter (its stages take half, a quarter, ...)",
        "must be between 0 and 0.5",
        lambda e: 0 < e <= 0.5,
    )
    prefetch: int = _option(
        4,
        "requests a take leases at least (politeness=engine; an owner sizes each take by "
        "how many of a host's requests may wait unstarted)",
        "must be from 1 to 1000",
        lambda n: 1 <= n <= 1000,
    )
    politeness: str = _option(
        "owner",
        "owner: each host owned by one engine at a time, which keeps its limits (every "
        "engine together is polite); engine: one queue, each engine polite alone",
        "must be owner or engine (cluster, the host queues of earlier versions, became owner)",
        lambda p: p in ("owner", "engine"),
    )
    replicas: int = _option(
        0,
        "replicas an add must reach (WAIT) before its page is acknowledged (cluster: 1)",
        "must be from 0 to 16",
        lambda n: 0 <= n <= 16,
    )
    wait: str = _option(
        "all",
        "which writes wait for them: all (adds and takes) or adds",
        "must be adds or all",
        lambda w: w in ("adds", "all"),
    )

    @classmethod
    def from_url(cls, url: str) -> RedisOptions:
        """Our options come from the query string; the rest goes to redis-py."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        names = loadable(cls)
        ours = {k: v for k, v in query if k in names}
        rest = urlencode([(k, v) for k, v in query if k not in names])
        given = {
            "url": _with_query(url, rest),
            "replicas": 1 if _is_cluster(url) else 0,
        }
        try:
            return load(cls, Source(ours), given=given)
        except ConfigError as exc:
            if exc.key not in names:
                raise
            problem = str(exc).removeprefix(f"{exc.key}: ")
            raise ConfigError("frontier", f"option {exc.key} {problem} ({redact(url)})") from None

    def check(self) -> None:
        """Fail at start, naming the option, rather than half-way through a crawl."""
        if _is_cluster(self.url):
            cluster_seeds(self.url)

    def seen_mode(self, parts: int = 1) -> str:
        """The seen set's mode as the scripts read it: ``exact``, or ``bloom:C:P``, the
        first stage's capacity and false-positive rate (``BLOOM_LUA``). A crawl whose
        seen set is cut in ``parts`` (owned hosts' buckets) gives each part its share of
        the first stage (at least 1,000 URLs): the filters grow as their parts fill."""
        if self.seen == "exact":
            return "exact"
        return f"bloom:{max(1000, self.bloom_capacity // parts)}:{self.bloom_error / 2!r}"


def _is_cluster(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


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


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return url.replace(parts.netloc, f"{parts.username or ''}:***@{host}", 1)


def _with_query(url: str, query: str) -> str:
    """``url`` with its query string replaced, the rest kept as the user wrote it.

    The URL is never split and joined again: ``urlunsplit`` writes ``unix:///x`` as
    ``unix:/x``, which redis-py 8.2 refuses.
    """
    base = url.partition("?")[0]
    return f"{base}?{query}" if query else base


def bloom_hashes(fingerprint: bytes) -> str:
    """Two 32-bit hashes of the (already uniform) fingerprint, from which every stage of
    the Bloom filter derives its bits (double hashing, in ``BLOOM_LUA``)."""
    first = int.from_bytes(fingerprint[:4], "big")
    step = int.from_bytes(fingerprint[4:8], "big") | 1
    return f"{first} {step}"


def refusal(exc: Exception, url: str) -> FrontierFailed | None:
    """None when ``exc`` says Redis cannot serve yet (``_TRANSIENT``: wait, retry); else
    the crawl's failure: Redis refuses (out of memory, no permission), and a crawl that
    went on would count the page failed and acknowledge it without its links."""
    if isinstance(exc, _TRANSIENT):
        return None
    return FrontierFailed(f"Redis at {redact(url)} refused the crawl: {exc}")
