"""An application that set up stdlib logging its own way, then embeds an engine.

    python -m tests.netdisco.logging_app LEVEL DEAD_ZK_PORT URL

Logging goes to stderr at LEVEL (``logging.basicConfig``); the engine registers with a
ZooKeeper that is not there (kazoo's reconnect lines) and crawls URL with a callback
that raises (a traceback with a local variable worth hiding). It prints only ``RESULT``
on stdout, once ZooKeeper has been given up as unreachable.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from typing import Any

from netdisco import EngineSettings, Response, Spider, SpiderEngine
from netdisco.testing import eventually


class Boom(Spider):
    name = "boom"

    def parse(self, response: Response) -> Iterator[Any]:
        secret = "hunter2"  # a local: never in a log line unless asked
        raise ValueError(f"cannot parse {len(secret)}")


async def main(zk_port: str, url: str) -> None:
    zookeeper = {"hosts": f"127.0.0.1:{zk_port}", "session_timeout": 2.0}
    async with SpiderEngine(EngineSettings(id="lib", port=0), zookeeper=zookeeper) as engine:
        await engine.start()
        result = await engine.crawl(Boom, [url])
        said = await eventually(
            lambda: engine.registry_said.startswith("unregistered"), "given up", timeout=30
        )
        print("RESULT", result.state, result.errors["callback"], said, flush=True)


if __name__ == "__main__":
    level, zk_port, url = sys.argv[1:]
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr)
    asyncio.run(main(zk_port, url))
