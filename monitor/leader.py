"""Which monitor delivers the alerts: a leader latch of ephemeral sequential znodes.

Every monitor keeps one node ``<root>.monitors/m-<instance>-<sequence>`` on its own
session, with its address as data; the node with the lowest sequence delivers. This is
Curator's ``LeaderLatch`` (kazoo's ``Election`` recipe), done on the loop: kazoo's
recipes block a thread, and here every ZooKeeper call is awaited
(:mod:`netdisco.cluster.zk`). The instance in the name is Curator's "protected" mode:
after a connection loss the monitor finds the node it may have created and does not
make a second one. When the leader's session dies (crash, ``kill -9``, partition) the
server drops its node after the session timeout, the children watch wakes the others,
and the next in line leads. A monitor that is not connected (or only suspended) does
not count itself the leader: it cannot mark what it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState, WatchedEvent

from netdisco._tasks import wait_event
from netdisco.cluster.zk import Bridge, wait_result

log = structlog.get_logger(__name__)

#: seconds between two looks at the latch when nothing wakes it
RESYNC = 5.0
#: the monitors one latch lists (more are not read) and the bytes one's data may have
MAX_MONITORS = 64
MAX_DATA = 4096
_SEQ = 10  # ZooKeeper's sequence suffix: ten digits


def monitors_root(root: str) -> str:
    """Where the monitors' latch nodes live, beside the engines' root."""
    return f"{root.rstrip('/') or ''}.monitors"


class Latch:
    """This monitor's place in the latch; ``leading`` while it delivers (module docstring).

    ``on_change`` is called on the loop whenever who leads, or who runs, may have changed.
    """

    def __init__(
        self,
        client: KazooClient,
        root: str,
        acl: Any,
        about: Callable[[], dict[str, Any]],
        on_change: Callable[[], None],
    ) -> None:
        self.client = client
        self.path = monitors_root(root)
        self.acl = acl
        self.instance = uuid.uuid4().hex[:16]
        self._prefix = f"m-{self.instance}-"
        self._about = about
        self._on_change = on_change
        self.leading = False
        self.since: float | None = None  # when this monitor last became the leader
        self.monitors: list[dict[str, Any]] = []  # every monitor running, the leader first
        self._connected = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watch: Callable[[WatchedEvent], None] | None = None

    def start(self) -> None:
        bridge = Bridge(self.client, asyncio.get_running_loop())
        self._watch = bridge.watcher(lambda _event: self._wake.set())
        bridge.add_listener(self._on_state)
        self._connected = self.client.connected
        self._task = asyncio.create_task(self._run(), name="monitor-latch")

    async def close(self) -> None:
        """Leave the latch at once, so that the next monitor delivers without waiting for
        this session to expire."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set(False)
        with contextlib.suppress(KazooException, TimeoutError):
            async with asyncio.timeout(2.0):
                for name in await self._children():
                    if name.startswith(self._prefix):
                        await wait_result(self.client.delete_async(f"{self.path}/{name}"))

    def live(self) -> set[str]:
        """The instances of the monitors running now (this one included)."""
        return {m["instance"] for m in self.monitors}

    def view(self) -> dict[str, Any]:
        """Who delivers, and every monitor running, for the dashboard and the API."""
        leader = self.monitors[0] if self.monitors else None
        return {
            "instance": self.instance,
            "delivering": self.leading,
            "delivering_since": self.since,
            "leader": leader,
            "monitors": list(self.monitors),
        }

    def _on_state(self, state: KazooState) -> None:
        self._connected = state == KazooState.CONNECTED
        if not self._connected:
            self._set(False)  # suspended or lost: it cannot mark what it sends
        self._wake.set()

    def _set(self, leading: bool) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        self.since = time.time() if leading else None
        log.info("alerts_leader" if leading else "alerts_follower", instance=self.instance,
                 monitors=len(self.monitors))  # fmt: skip
        self._on_change()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            if self._connected:
                try:
                    await self._look()
                except KazooException as exc:  # a connection loss: CONNECTED wakes us
                    log.info("latch_interrupted", error=repr(exc))
                    self._set(False)
            await wait_event(self._wake, RESYNC)

    async def _children(self) -> list[str]:
        children = await wait_result(self.client.get_children_async(self.path, watch=self._watch))
        return [c for c in children if len(c) > _SEQ and c[-_SEQ:].isdigit()]

    async def _look(self) -> None:
        try:
            children = await self._children()
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                await wait_result(self.client.create_async(self.path, b"", acl=self.acl))
            children = await self._children()
        mine = sorted((c for c in children if c.startswith(self._prefix)), key=_seq)
        if not mine:
            await self._join()
            return  # the create wakes the watch: the next look reads it
        for extra in mine[1:]:  # a create that landed before a connection loss
            with contextlib.suppress(NoNodeError):
                await wait_result(self.client.delete_async(f"{self.path}/{extra}"))
        ordered = sorted((c for c in children if c not in mine[1:]), key=_seq)[:MAX_MONITORS]
        datas = await asyncio.gather(*(self._read(name) for name in ordered))
        self.monitors = [d for d in datas if d is not None]
        first = self.monitors[0]["instance"] if self.monitors else None
        self._set(first == self.instance and self._connected)
        self._on_change()

    async def _join(self) -> None:
        data = {**self._about(), "instance": self.instance, "pid": os.getpid(),
                "hostname": socket.gethostname(), "joined_at": time.time()}  # fmt: skip
        await wait_result(self.client.create_async(
            f"{self.path}/{self._prefix}", json.dumps(data).encode(), acl=self.acl,
            ephemeral=True, sequence=True,
        ))  # fmt: skip
        self._wake.set()

    async def _read(self, name: str) -> dict[str, Any] | None:
        """One monitor's node, checked: a bounded JSON object whose instance is its name's."""
        try:
            raw, _ = await wait_result(self.client.get_async(f"{self.path}/{name}"))
        except NoNodeError:
            return None
        try:
            data = json.loads(raw[:MAX_DATA]) if raw and len(raw) <= MAX_DATA else None
        except ValueError:
            data = None
        instance = name[2 : -_SEQ - 1]
        out: dict[str, Any] = {"instance": instance, "node": name}
        if isinstance(data, dict) and data.get("instance") == instance:
            for key in ("url", "version", "pid", "hostname", "joined_at"):
                value = data.get(key)
                if isinstance(value, str | int | float) and len(str(value)) <= 300:
                    out[key] = value
        return out


def _seq(name: str) -> int:
    return int(name[-_SEQ:])
