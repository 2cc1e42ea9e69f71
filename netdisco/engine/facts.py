"""Node facts: what the machine and the process look like, for the znode and the status.

Read every ``INTERVAL`` seconds by a task of the engine (``psutil`` calls take a few
hundred microseconds, never on a crawl's path), and kept as the last reading, which
``SpiderEngine.describe`` puts into the znode (``EnginePayload.facts``; readers parse
it with ``netdisco.cluster.contract.parse_facts``). A fact that cannot be read (no
``/proc``, a directory gone) is left out, never an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import psutil

from netdisco._version import __version__

#: seconds between readings
INTERVAL = 5.0


def read_facts(directories: Mapping[str, str], process: psutil.Process) -> dict[str, Any]:
    """One reading; ``directories`` names the directories whose free space counts."""
    facts: dict[str, Any] = {"python": platform.python_version(), "netdisco": __version__}
    with contextlib.suppress(OSError, psutil.Error):
        facts["cpu_percent"] = float(psutil.cpu_percent(interval=None))
    with contextlib.suppress(OSError, AttributeError):
        facts["load1"] = round(os.getloadavg()[0], 2)
    with contextlib.suppress(OSError, psutil.Error):
        memory = psutil.virtual_memory()
        facts["memory_total"], facts["memory_available"] = memory.total, memory.available
    with contextlib.suppress(OSError, psutil.Error):
        facts["rss"] = process.memory_info().rss
    with contextlib.suppress(OSError, psutil.Error, AttributeError):
        facts["open_fds"] = process.num_fds()
    free = {}
    for name, path in directories.items():
        with contextlib.suppress(OSError):
            free[name] = shutil.disk_usage(path).free
    if free:
        facts["disk_free"] = free
    return facts


class NodeFacts:
    """The last reading, refreshed by ``run`` (a task the engine owns)."""

    def __init__(self, directories: Callable[[], Mapping[str, str]]) -> None:
        self._directories = directories
        self._process = psutil.Process()
        self.current: dict[str, Any] = {}

    def refresh(self) -> dict[str, Any]:
        """Read now (the first CPU figure is 0: psutil measures from the previous call)."""
        self.current = read_facts(self._directories(), self._process)
        return self.current

    async def run(self, changed: Callable[[], None]) -> None:
        """Refresh every ``INTERVAL`` s; ``changed`` tells the registry there is news."""
        while True:
            self.refresh()
            changed()
            await asyncio.sleep(INTERVAL)
