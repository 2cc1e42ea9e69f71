"""What an engine hosts besides its crawlers, as narrow protocols with their defaults.

The engine runs an HTTP front, a cluster registration and lease keepers, but
depends only on these protocols: tests hand it fakes, applications their own
front, and nothing here imports the engine module.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from netdisco.cluster.contract import EnginePayload
from netdisco.engine.api import ServedEngine

if TYPE_CHECKING:
    from netdisco.cluster.settings import ZooKeeperSettings


class Registry(Protocol):
    """What the engine needs from its cluster registration (``netdisco.cluster.registry``)."""

    async def start(self) -> None: ...

    def data_changed(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def healthy(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...


#: builds a registry from the engine id and the callable that describes the engine
RegistryFactory = Callable[[str, Callable[[], EnginePayload]], Registry]


def zookeeper_settings(table: Mapping[str, Any]) -> ZooKeeperSettings:
    """``[zookeeper]`` validated now, not at start (``NETDISCO_ZOOKEEPER_*`` win)."""
    from netdisco.cluster.settings import ZooKeeperSettings  # kazoo only when configured

    return ZooKeeperSettings.from_mapping(table, prefix="zookeeper", environ=os.environ)


def zookeeper_registry(settings: ZooKeeperSettings) -> RegistryFactory:
    """A factory for the engine's ZooKeeper registration."""
    from netdisco.cluster.registry import Registration  # kazoo only when configured

    def build(engine_id: str, describe: Callable[[], EnginePayload]) -> Registry:
        return Registration(settings, engine_id, describe)

    return build


class HttpFront(Protocol):
    """What the engine needs from its HTTP endpoint: bind, serve, close."""

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port``; the port actually bound (0 picks one)."""
        ...

    async def stop(self) -> None:
        """Close the listener and idle connections."""
        ...


#: builds the HTTP front for an engine; ``HttpEndpoint`` is the default
FrontFactory = Callable[[ServedEngine], HttpFront]


class LeaseKeeper(Protocol):
    """Returns lost engines' leases in a shared frontier (``netdisco.frontiers.redis.recovery``)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def lease_keeper(frontier: str, zookeeper: ZooKeeperSettings, incarnation: str) -> LeaseKeeper:
    """The watcher that returns lost engines' leases in the shared frontier ``frontier``."""
    from netdisco.frontiers.redis.recovery import lease_recovery  # redis-py only when asked

    return lease_recovery(frontier, zookeeper, incarnation)
