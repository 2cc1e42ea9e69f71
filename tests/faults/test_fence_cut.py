"""Fencing under a real cut (``make faults``): an engine cut off from ZooKeeper starts no
leased work once the others may have recovered it. Real Redis, real ZooKeeper (reached
through a proxy that cuts the link), a real site on loopback that stamps each request
with the time and the engine's User-Agent.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from pathlib import Path

from aiohttp import web
from kazoo.client import KazooClient

from netdisco import Crawler, Settings, SpiderState
from netdisco._fence import Fence
from netdisco.cluster.contract import CONTRACT, payload_from_dict
from netdisco.cluster.registry import Registration
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.crawl.codec import frontier_for
from netdisco.frontiers.redis.recovery import lease_recovery
from netdisco.testing import eventually
from tests.faults.proxy import DelayProxy
from tests.netdisco import conftest as site_fixtures
from tests.netdisco.redis_support import SiteServer, site_spider

SESSION_TIMEOUT = 2.0

# the shared crawl's fixtures (a generated site, a Redis server, a key prefix a test)
site_dir = site_fixtures.site_dir
redis_server = site_fixtures.redis_server
redis_url = site_fixtures.redis_url


class StampedSite(SiteServer):
    """The generated site; each page request stamped (time, User-Agent, path)."""

    def __init__(self, root: Path, delay: float) -> None:
        super().__init__(root, delay)
        self.arrivals: list[tuple[float, str, str]] = []

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path != "/robots.txt":
            agent = request.headers.get("User-Agent", "")
            self.arrivals.append((time.monotonic(), agent, request.path))
        return await super()._handle(request)


def node_of_a(zk_hosts: str) -> str:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=15)
    try:
        stat = client.exists("/netdiscovery/a")
        return (
            "a's node is gone"
            if stat is None
            else f"a's node lives (owner {stat.owner_session_id:#x})"
        )
    finally:
        client.stop()
        client.close()


async def test_an_engine_cut_from_zookeeper_starts_nothing_once_its_leases_can_be_recovered(
    site_dir: Path, redis_url: str, zk_hosts: str, zk_server: object
) -> None:
    """Two engines share a crawl; one loses its ZooKeeper link past its session. The other
    recovers its leases; the cut one starts no request from then until the link heals,
    then gives back what it held and crawls on. Every page is fetched."""
    site = StampedSite(site_dir, delay=0.1)
    await site.start()
    chroot = zk_hosts[zk_hosts.index("/") :]
    host, port = zk_hosts[: zk_hosts.index("/")].rsplit(":", 1)
    proxy = DelayProxy(host, int(port)).start()
    url = f"{redis_url}&politeness=engine" if "?" in redis_url else redis_url
    fence = Fence()
    members: list[tuple[Crawler, Registration]] = []
    recovery = lease_recovery(url, ZooKeeperSettings(hosts=zk_hosts), "b")
    try:
        for name, hosts, its_fence in (("a", proxy.hosts + chroot, fence), ("b", zk_hosts, None)):
            spider = site_spider(site.base)
            s = Settings(frontier=url, concurrency=8, per_host_concurrency=8, retries=0,
                         progress_interval=0, user_agents=(f"engine-{name}",))  # fmt: skip
            crawler = Crawler(spider, s, frontier=frontier_for(s, spider, name))
            crawler.frontier.fence = its_fence
            zk = ZooKeeperSettings(hosts=hosts, session_timeout=SESSION_TIMEOUT, audit_interval=1.0)
            # the contract engines write: a loss is told from a leave by the tombstone, not
            # by how soon after a write the node went (contract 1's guess, which a loaded
            # loop that notices a write late can get wrong: a loss taken for a leave)
            data = {"id": name, "incarnation": name, "pid": os.getpid(), "spiders": [],
                    "contract": CONTRACT}  # fmt: skip
            describe = functools.partial(payload_from_dict, data)
            registration = Registration(zk, name, describe, fence=its_fence)
            await registration.start()
            members.append((crawler, registration))
        await recovery.start()
        await eventually(lambda: all(r.healthy for _, r in members), "both registered")
        # b's recovery connects in the background: a node gone before its first listing
        # was never in its view, so it could not be seen lost (2 in 15 runs under load)
        await eventually(lambda: {"a", "b"} <= recovery.view.members.keys(), "b watching a")
        for crawler, _ in members:
            await crawler.start()
        await eventually(lambda: len(site.arrivals) > 40, "crawling", timeout=20)

        cut = time.monotonic()
        proxy.cut()
        try:
            await eventually(lambda: any(r.incarnation == "a" for r in recovery.recoveries),
                             "a's leases recovered", timeout=15)  # fmt: skip
        except AssertionError as exc:  # say why: a's node, as the server and b see it
            raise AssertionError(f"{exc}; {await asyncio.to_thread(node_of_a, zk_hosts)}; "
                                 f"b's view: {sorted(recovery.view.members)}, "
                                 f"b connected: {recovery._client and recovery._client.state}"
                                 ) from None  # fmt: skip
        await asyncio.sleep(1.0)  # b fetches what a held
        healed = time.monotonic()
        proxy.heal()
        registration_a = members[0][1]
        await eventually(lambda: registration_a.healthy and fence.is_open, "a back", timeout=20)
        site.delay = 0.002
        states = await asyncio.wait_for(asyncio.gather(*(c.wait() for c, _ in members)), 60)
    finally:
        await recovery.stop()
        for crawler, registration in members:
            await registration.stop()
            await crawler.frontier.close()
        await asyncio.to_thread(proxy.stop)
        await site.stop()

    assert states == [SpiderState.FINISHED] * 2
    late = [t - cut for t, agent, _ in site.arrivals
            if agent == "engine-a" and cut + SESSION_TIMEOUT < t < healed]  # fmt: skip
    assert late == []  # no request begun once its leases could be handed out
    assert fence.epoch == 1
    assert any(agent == "engine-a" and t > healed for t, agent, _ in site.arrivals)
    assert set(site.pages) <= set(site.fetches)  # nothing lost
    assert site.duplicates <= 8 + 4  # at most what was in flight (and prefetched) at the cut
