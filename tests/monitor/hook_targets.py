"""Python callables the monitor's callable hook loads by dotted path in the tests."""

from __future__ import annotations

import asyncio
import json
import os
import threading

from monitor.events import Event

RECEIVED: list[tuple[str, str, str | None]] = []


def sync_hook(event: Event) -> None:
    RECEIVED.append(("sync", event.type.value, event.engine_id))


async def async_hook(event: Event) -> None:
    await asyncio.sleep(0)
    RECEIVED.append(("async", event.type.value, event.engine_id))


async def never_returns(event: Event) -> None:
    await asyncio.sleep(3600)


NOT_CALLABLE = 42


def hangs_forever(event: Event) -> None:
    """A sync hook that never returns (its thread is a daemon, so the test can end)."""
    threading.Event().wait()


def to_file(event: Event) -> None:
    """A monitor in a subprocess: each event's JSON, one line, to ``$TEST_HOOK_FILE``."""
    with open(os.environ["TEST_HOOK_FILE"], "a", encoding="utf-8") as out:
        out.write(json.dumps(event.to_json()) + "\n")
