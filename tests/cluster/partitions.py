"""``make partitions``: links cut at random moments under a running shared crawl.

The machines of ``make cluster-check`` (tests/cluster/cluster.py); per scenario a fresh
crawl of the counting site (``HOSTS`` hosts, tests/cluster/site.py) by three engines
with owned hosts (``politeness=owner``: each host crawled by one engine at a time; Redis
emptied, engines restarted), then ``NDC_CUTS`` cuts (20 by default) of 1 to 10 s at
random moments, each healed and waited out, then the site is made fast so the crawl
ends. Scenarios:

* ``engine-zk``: one engine and the three ZooKeeper servers (blackhole routes on both
  sides); its session expires on a cut longer than ``SESSION_TIMEOUT``;
* ``engine-redis``: one engine and Redis (``lease_ttl`` 5 s; its bucket leases, the
  ownership of its hosts, last ``OWNER_TTL_MS`` 3 s unless renewed, so most cuts
  outlast them and its hosts move to the other engines);
* ``monitor-zk``: the monitor and the three ZooKeeper servers;
* ``zk-follower``: one ZooKeeper follower's link down;
* ``zk-leader``: the ZooKeeper leader's link down (a new leader is elected).

Per scenario: pages never fetched (lost), pages fetched twice (counted at the site),
late starts (requests the cut engine *began* at the site after what it held could be
handed to others: after the cut plus the session timeout in ``engine-zk``; in
``engine-redis`` after the cut plus the shorter of ``lease_ttl`` and the bucket-lease
TTL, past which an engine cut from Redis must start nothing of its hosts), false events
(``engine_lost``/``engine_left`` of an engine not cut, or of a cut engine whose cut was
too short to expire its session), and the time from the heal until the cut part works
again. ``NDC_SCENARIOS=engine-zk,monitor-zk`` picks some.

Working again, for a cut engine of ``engine-redis``: it is a member again (its entry in
the crawl's ``members`` set in Redis pushed on since the heal) and, if it wins a host of
the site among the live members, it fetched a page since the heal; if it wins none
(members are engine incarnations, so a run may give one engine no host of the few),
holding a bucket lease again shows it settled, since there is nothing it could fetch.

The run fails (exit 1) on any page lost, any late start, any false event, a crawl not
finished ``END_LIMIT`` s after the last cut healed (the site made fast), a cut part that
never recovered, or anything left behind (namespaces, links, processes). ``NDC_BREAK``
starts broken engines or a broken monitor (tests/cluster/broken.py) to show it does.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from netdisco.crawl.urls import host_key
from netdisco.frontiers.redis.leases import DEFAULT_PREFIX, Keys
from netdisco.frontiers.redis.owned import OWNER_TTL_MS
from netdisco.frontiers.redis.owners import BUCKETS, BucketKeys, bucket_of, winner
from tests.cluster.cluster import (
    ENGINES,
    MACHINES,
    REDIS_PORT,
    SESSION_TIMEOUT,
    SITE_PORT,
    ZKS,
    Cluster,
    http,
    wait_for,
)
from tests.cluster.machines import leftovers
from tests.cluster.site import HOSTS, PAGES, Fetch, page_paths, page_url

LEASE_TTL = 5.0
#: how long after a cut from Redis an engine may still start requests of its hosts: its
#: bucket leases' TTL (counted from its last renewal, sent before the cut) when shorter
#: than the request leases'
REDIS_LIMIT = min(LEASE_TTL, OWNER_TTL_MS / 1000)
SPIDER = "tree"  # the crawl's name in Redis: tests.cluster.site.Tree
CUTS = int(os.environ.get("NDC_CUTS", "20"))
SLOW, FAST = 1.0, 0.002  # the site's delay while links are cut, then to end the crawl
RECOVERY_LIMIT = 60.0
#: a crawl must be finished this long after the last heal (the site made fast then)
END_LIMIT = 240.0


@dataclass
class Cut:
    began: float
    healed: float
    target: str  # the engine, server or "monitor" cut off
    recovered: float | None = None


@dataclass
class Result:
    name: str
    cuts: list[Cut] = field(default_factory=list)
    lost: int = 0
    twice: int = 0
    late: int = 0
    expired: int = 0  # cuts long enough to end a session (or a lease)
    expiries: int = 0  # engine_lost of an uncut engine whose session ZooKeeper did end
    false_events: list[str] = field(default_factory=list)
    events: int = 0
    crawl: float = 0.0
    ended: float | None = None  # from the last heal to the crawl finished (None: never)

    def failures(self) -> list[str]:
        """Why this scenario fails the run (empty: it passed)."""
        found = []
        if self.lost:
            found.append(f"{self.lost} pages lost")
        if self.late:
            found.append(f"{self.late} late starts by a fenced engine")
        if self.false_events:
            found.append(f"false events: {', '.join(self.false_events[:5])}")
        if self.ended is None:
            found.append(f"the crawl did not end within {END_LIMIT:.0f} s of the last heal")
        never = sum(c.recovered is None for c in self.cuts)
        if never:
            found.append(f"{never} cuts never recovered within {RECOVERY_LIMIT:.0f} s")
        return found

    def row(self) -> str:
        times = [c.recovered for c in self.cuts if c.recovered is not None]
        slow = f"{statistics.median(times):.1f} / {max(times):.1f}" if times else "-"
        never = sum(c.recovered is None for c in self.cuts)
        return (
            f"| {self.name} | {len(self.cuts)} ({self.expired} long) | {self.lost} | "
            f"{self.twice} | {self.late} | {len(self.false_events)} | {self.expiries} | {slow}"
            f"{f' ({never} never)' if never else ''} | {self.crawl:.0f} s |"
        )


class Partitions:
    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.c = cluster
        self.rng = rng

    def fresh_crawl(self, extra: str = "") -> float:
        for engine_id in ENGINES:
            self.c.net.kill(engine_id, signal.SIGTERM)
        self.c.redis_cli("flushall")
        for feed in (self.c.work / "items").glob("*.jsonl"):
            feed.unlink()
        http("POST", f"{self.c.site}/counts/reset")
        http("POST", f"{self.c.site}/delay/{SLOW}")
        began = time.time()
        for engine_id in ENGINES:
            self.c.start_engine(engine_id, extra=extra)
        for engine_id in ENGINES:
            self.c.wait_engine(engine_id)
        wait_for("fetching", lambda: len(self.c.counts()) > 20 or None, 60)
        return began

    def finish(self, result: Result, began: float) -> None:
        http("POST", f"{self.c.site}/delay/{FAST}")
        healed = time.time()
        try:
            wait_for("a finished crawl", self.c.crawl_finished, END_LIMIT, 1.0)
            result.ended = time.time() - healed
        except TimeoutError as exc:
            print(f"     {result.name}: {exc}; engines: {self.states()}", flush=True)
        result.crawl = time.time() - began
        counts = self.c.counts()
        result.lost = len(page_paths() - set(counts))
        result.twice = sum(n > 1 for n in counts.values())

    def run(self, name: str, cut: Callable[[float], Cut], extra: str = "") -> Result:
        result = Result(name)
        began = self.fresh_crawl(extra)
        for n in range(CUTS):
            time.sleep(self.rng.uniform(1.0, 4.0))
            done = cut(self.rng.uniform(1.0, 10.0))
            result.cuts.append(done)
            print(f"     {name} {n + 1}/{CUTS}: {done.target} cut "
                  f"{done.healed - done.began:.1f} s, back in "
                  f"{done.recovered if done.recovered is None else round(done.recovered, 1)} s",
                  flush=True)  # fmt: skip
        self.finish(result, began)
        self.judge(result, began)
        print(f"     {name}: pages per engine and host (port - {SITE_PORT}): "
              f"{self.c.hosts_fetched()}", flush=True)  # fmt: skip
        return result

    # -- the cuts --------------------------------------------------------------------------

    def engine_zk(self, seconds: float) -> Cut:
        engine = self.rng.choice(sorted(ENGINES))
        machine = ENGINES[engine]
        began = time.time()
        for zk in ZKS:
            self.c.net.cut_pair(machine, zk)
        time.sleep(seconds)
        for zk in ZKS:
            self.c.net.mend_pair(machine, zk)
        done = Cut(began, time.time(), engine)
        done.recovered = self.until(done, lambda: self.registered(engine))
        return done

    def engine_redis(self, seconds: float) -> Cut:
        engine = self.rng.choice(sorted(ENGINES))
        machine = ENGINES[engine]
        began = time.time()
        self.c.net.cut_pair(machine, "redis")
        time.sleep(seconds)
        self.c.net.mend_pair(machine, "redis")
        done = Cut(began, time.time(), engine)
        done.recovered = self.until(done, lambda: self.owning_again(engine, done.healed))
        return done

    def monitor_zk(self, seconds: float) -> Cut:
        began = time.time()
        for zk in ZKS:
            self.c.net.cut_pair("monitor", zk)
        time.sleep(seconds)
        for zk in ZKS:
            self.c.net.mend_pair("monitor", zk)
        done = Cut(began, time.time(), "monitor")
        done.recovered = self.until(done, self.monitor_whole)
        return done

    def zk_follower(self, seconds: float) -> Cut:
        leader = self.leader()
        return self.zk_cut(self.rng.choice([z for z in ZKS if z != leader]), leader, seconds)

    def zk_leader(self, seconds: float) -> Cut:
        leader = self.leader()
        return self.zk_cut(leader, leader, seconds)

    def leader(self) -> str:
        return wait_for(
            "a ZooKeeper leader",
            lambda: next((z for z in ZKS if self.c.zk_mode(z) == "leader"), None),
            RECOVERY_LIMIT,
        )

    def zk_cut(self, server: str, leader: str, seconds: float) -> Cut:
        began = time.time()
        fetched = len(self.fetches())
        self.c.net.cut(server)
        time.sleep(seconds)
        during = len(self.fetches()) - fetched
        self.c.net.mend(server)
        done = Cut(began, time.time(), f"{server} ({'leader' if server == leader else 'follower'},"
                   f" {during} pages meanwhile)")  # fmt: skip
        done.recovered = self.until(done, lambda: self.c.zk_mode(server))
        return done

    # -- what is watched -------------------------------------------------------------------

    def until(self, cut: Cut, probe: Callable[[], Any]) -> float | None:
        try:
            wait_for("recovery", probe, RECOVERY_LIMIT, 0.1)
        except TimeoutError:
            return None
        return time.time() - cut.healed

    def states(self) -> dict[str, Any]:
        """Each engine's spiders and their states (what a crawl that did not end shows)."""
        found: dict[str, Any] = {}
        for engine in ENGINES:
            try:
                spiders = http("GET", self.c.engine_url(engine, "/netdiscovery/spiders"))
                found[engine] = {s["name"]: s["state"] for s in spiders}
            except Exception as exc:  # an engine that does not answer says so
                found[engine] = repr(exc)
        return found

    def registered(self, engine: str) -> bool | None:
        status = http("GET", self.c.engine_url(engine, "/netdiscovery/health"))
        return True if status.get("registry") == "registered" else None

    def monitor_whole(self) -> bool | None:
        http("GET", f"{self.c.monitor}/netdiscovery/health")  # a 503 raises: not yet
        view = http("GET", f"{self.c.monitor}/netdiscovery/monitor")
        return True if len(view["engines"]) == len(ENGINES) else None

    def fetches(self) -> list[Fetch]:
        return self.c.fetches()

    def fetched_since(self, address: str, since: float) -> bool | None:
        return True if any(t > since and a == address for t, a, _, _ in self.fetches()) else None

    def owning_again(self, engine: str, since: float) -> bool | None:
        """An engine cut from Redis works again (module docstring): a member again and
        fetching if it wins a host of the site, holding a bucket lease if it wins none."""
        incarnation = http("GET", self.c.engine_url(engine, "/netdiscovery/health"))["incarnation"]
        with redis.Redis(MACHINES["redis"], REDIS_PORT, socket_timeout=5) as r:
            members = Keys(DEFAULT_PREFIX, SPIDER).members
            deadline = r.zscore(members, incarnation)
            if deadline is None or deadline < since * 1000 + OWNER_TTL_MS:
                return None  # no beat since the heal
            seconds, micros = r.time()  # the members' deadlines are on Redis's clock
            live = [
                m.decode()
                for m in r.zrangebyscore(members, seconds * 1000 + micros // 1000, "+inf")
            ]
            hosts = {host_key(page_url(self.c.site, n)) for n in range(HOSTS)}
            if any(winner(bucket_of(h), live) == incarnation for h in hosts):
                return self.fetched_since(MACHINES[ENGINES[engine]], since)
            with r.pipeline(transaction=False) as pipe:
                for bucket in range(BUCKETS):
                    pipe.hget(BucketKeys.of(DEFAULT_PREFIX, SPIDER, bucket).lease, "owner")
                owners = pipe.execute()
        return True if incarnation.encode() in owners else None

    def judge(self, result: Result, began: float) -> None:
        """Late starts and false events, from the site's log and the monitor's events."""
        fetches = self.fetches()
        limit = REDIS_LIMIT if result.name == "engine-redis" else SESSION_TIMEOUT
        engine_cut = result.name.startswith("engine-")
        for cut in result.cuts:
            long = cut.healed - cut.began > limit
            result.expired += long
            if engine_cut and long:
                address = MACHINES[ENGINES[cut.target]]
                result.late += sum(
                    cut.began + limit < t <= cut.healed and a == address for t, a, _, _ in fetches
                )
        events = sorted(
            (e for e in self.c.events() if e["time"] >= began),
            key=lambda e: (e["time"], e.get("seq", 0)),
        )
        result.events = len(events)
        for n, event in enumerate(events):
            if event["type"] not in ("engine_lost", "engine_left"):
                continue
            if not self.explained(result, event, events[n + 1 :]):
                result.false_events.append(f"{event['type']} {event['engine_id']}")

    def explained(self, result: Result, event: dict[str, Any], later: list[Any]) -> bool:
        """An engine_lost of an engine whose session ZooKeeper did end: the engine came
        back on a new session. In engine-zk it must also be the engine cut at the time
        (ZooKeeper expires a session ``SESSION_TIMEOUT`` after it last heard the client,
        which pings only every third of it when idle: a cut from two thirds of the
        timeout on can end one). A loss that nothing ended, the engine still on its
        session afterwards, is false."""
        if event["type"] != "engine_lost":
            return False
        if result.name == "engine-zk" and not any(
            c.target == event["engine_id"] and c.began <= event["time"] <= c.healed + RECOVERY_LIMIT
            for c in result.cuts
        ):
            return False
        session = (event.get("engine") or {}).get("session")
        if session is not None and expired_session(event, later):
            result.expiries += 1
            return True
        return False


def expired_session(lost: dict[str, Any], later: list[dict[str, Any]]) -> bool:
    """Whether the engine of ``lost`` came back on another session: its old one ended."""
    engine, session = lost["engine_id"], lost["engine"]["session"]
    return any(
        e["engine_id"] == engine
        and e["type"] in ("engine_joined", "engine_restarted")
        and (e.get("engine") or {}).get("session") not in (None, session)
        for e in later
    )


def main() -> int:
    if os.geteuid() != 0:
        print("make partitions needs root (network namespaces)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="netdisco-partitions-"))
    cluster = Cluster(work, broken=os.environ.get("NDC_BREAK", ""))
    seed = int(os.environ.get("NDC_SEED", str(int(time.time()))))
    p = Partitions(cluster, random.Random(seed))
    scenarios: dict[str, tuple[Callable[[float], Cut], str]] = {
        "engine-zk": (p.engine_zk, ""),
        "engine-redis": (p.engine_redis, f"?lease_ttl={LEASE_TTL:g}"),
        "monitor-zk": (p.monitor_zk, ""),
        "zk-follower": (p.zk_follower, ""),
        "zk-leader": (p.zk_leader, ""),
    }
    chosen = os.environ.get("NDC_SCENARIOS", ",".join(scenarios)).split(",")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    results: list[Result] = []
    try:
        cluster.net.build()
        cluster.start_zookeeper()
        cluster.start_redis()
        cluster.start_site()
        cluster.start_mail()
        cluster.start_monitor()
        print(f"partitions: seed {seed}, {CUTS} cuts a scenario, {PAGES} pages on {HOSTS} "
              f"hosts (ports {SITE_PORT}-{SITE_PORT + HOSTS - 1})", flush=True)  # fmt: skip
        for name in chosen:
            cut, extra = scenarios[name]
            results.append(p.run(name, cut, extra))
            print(results[-1].row(), results[-1].false_events[:5], flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        cluster.net.close()
    left = leftovers(("NDC_ZK_DIGEST", cluster.digest))
    print("| scenario | cuts (long) | lost | twice | late starts | false events "
          "| sessions ended | recovery median / max | crawl |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for result in results:
        print(result.row())
    print(f"logs in {work / 'logs'}", flush=True)
    failures = [f"{r.name}: {why}" for r in results for why in r.failures()]
    failures += [f"not run: {name}" for name in chosen[len(results) :]]
    failures += [f"left behind: {what}" for what in left]
    for failure in failures:
        print(f"FAIL {failure}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
