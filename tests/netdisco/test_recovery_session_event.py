"""A session event handed to the lease recovery's watch (path None) means: list again.

Seen on namespaced machines (`make partitions`): when an engine's link to ZooKeeper was
cut past its session timeout, kazoo fired the watch with ``path=None`` and the callback
raised ``AttributeError`` on the loop instead of asking for a full listing.
"""

from __future__ import annotations

from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.frontiers.redis.recovery import LeaseRecovery


async def test_a_watch_event_without_a_path_asks_for_a_full_listing() -> None:
    recovery = LeaseRecovery(ZooKeeperSettings(hosts="127.0.0.1:1"), "redis://127.0.0.1:1/0")
    recovery._full = False
    recovery._on_watch(WatchedEvent(EventType.NONE, KazooState.LOST, None))
    assert recovery._full
    assert recovery._wake.is_set()
    assert not recovery._dirty
    recovery._on_watch(WatchedEvent(EventType.DELETED, KazooState.CONNECTED, "/netdiscovery/e1"))
    assert recovery._dirty == {"e1"}
