"""What an engine hosts besides its crawlers, and the defaults it builds.

The HTTP front and the cluster registration are narrow protocols, because
callers supply their own (``http_front``: the in-loop endpoint or the status
process, or an application's; ``registry_factory``: tests hand the engine fake
registries). The lease keepers are ``LeaseRecovery``, one per shared frontier.
Nothing here imports the engine module at run time (only for types).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import structlog

from netdisco.cluster.contract import EnginePayload
from netdisco.frontiers import is_shared

log = structlog.get_logger(__name__)

if TYPE_CHECKING:
    from netdisco._fence import Fence
    from netdisco.cluster.settings import ZooKeeperSettings
    from netdisco.engine.engine import SpiderEngine  # which imports this module: types only
    from netdisco.frontiers.redis.recovery import LeaseRecovery  # redis-py only when asked


class Registry(Protocol):
    """What the engine needs from its cluster registration (``netdisco.cluster.registry``)."""

    async def start(self) -> None: ...

    def data_changed(self) -> None: ...

    async def stop(self) -> None: ...

    @property
    def healthy(self) -> bool: ...

    def status(self) -> dict[str, Any]: ...


@runtime_checkable
class ThreadSafeMarks(Protocol):
    """A registry the engine's watchdog thread may use while the loop is blocked
    (``netdisco.cluster.registry.Registration``)."""

    def mark_from_thread(self, changes: Mapping[str, Any]) -> None: ...

    def drop_from_thread(self) -> None: ...


#: builds a registry from the engine id and the callable that describes the engine
RegistryFactory = Callable[[str, Callable[[], EnginePayload]], Registry]


def zookeeper_settings(table: Mapping[str, Any]) -> ZooKeeperSettings:
    """``[zookeeper]`` validated now, not at start (``NETDISCO_ZOOKEEPER_*`` win)."""
    from netdisco.cluster.settings import ZooKeeperSettings  # kazoo only when configured

    return ZooKeeperSettings.from_mapping(table, environ=os.environ)


def zookeeper_registry(
    settings: ZooKeeperSettings, token: str | None = None, fence: Fence | None = None
) -> RegistryFactory:
    """A factory for the engine's ZooKeeper registration; with the engine ``token`` its
    node and tombstone carry proofs (netdisco.cluster.proof); its session drives
    ``fence`` (netdisco._fence)."""
    from netdisco.cluster.proof import proof_key
    from netdisco.cluster.registry import Registration  # kazoo only when configured

    def build(engine_id: str, describe: Callable[[], EnginePayload]) -> Registry:
        key = proof_key(token)
        return Registration(settings, engine_id, describe, proof_key=key, fence=fence)

    return build


class HttpFront(Protocol):
    """What the engine needs from its HTTP endpoint: bind, serve, close."""

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port``; the port actually bound (0 picks one)."""
        ...

    async def stop(self) -> None:
        """Close the listener and idle connections."""
        ...


#: builds the HTTP front for an engine; ``sidecar.default_front`` is the default
FrontFactory: TypeAlias = "Callable[[SpiderEngine], HttpFront]"


def lease_keeper(frontier: str, zookeeper: ZooKeeperSettings, incarnation: str) -> LeaseRecovery:
    """The watcher that returns lost engines' leases in the shared frontier ``frontier``."""
    from netdisco.frontiers.redis.recovery import lease_recovery  # redis-py only when asked

    return lease_recovery(frontier, zookeeper, incarnation)


def run_claim(frontier: str, crawl: str, owner: str) -> Callable[[float], Awaitable[bool]] | None:
    """With a shared frontier: a claim so one engine of the cluster runs each tick."""
    if not is_shared(frontier):
        return None

    async def claim(tick: float) -> bool:
        from netdisco.frontiers.redis.runs import claim_run  # redis-py only when asked

        return await claim_run(frontier, crawl, tick, owner)

    return claim


class LeaseKeepers:
    """One lease watcher per shared frontier URL, started on first use, stopped together.

    Every live engine runs one per URL, which is safe because returning a lost
    engine's leases is one atomic script (``netdisco.frontiers.redis.recovery``).
    """

    def __init__(self, zookeeper: ZooKeeperSettings | None, incarnation: str) -> None:
        self._zookeeper = zookeeper
        self._incarnation = incarnation
        self._keepers: dict[str, LeaseRecovery] = {}

    async def ensure(self, frontier: str) -> None:
        """Watch for lost engines of ``frontier`` (with ZooKeeper and a shared frontier)."""
        if self._zookeeper is None or not is_shared(frontier) or frontier in self._keepers:
            return
        keeper = lease_keeper(frontier, self._zookeeper, self._incarnation)
        self._keepers[frontier] = keeper
        await keeper.start()

    async def stop(self) -> None:
        """Stop every watcher; one failing does not keep the others running."""
        for keeper in self._keepers.values():
            try:
                await keeper.stop()
            except Exception as exc:
                log.warning("lease_recovery_stop_failed", error=repr(exc))
