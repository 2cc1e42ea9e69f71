"""A custom offline hook for the monitor: a Python callable named by its dotted path.

The monitor calls it with each event it was configured for, after the grace
period (``monitor.toml``)::

    [callable]
    target = "examples.offline_hook:on_engine_lost"
    events = ["engine_lost"]

Here it answers the question an operator asks first, "is the engine really
down, or did only its ZooKeeper session go?", by probing the engine's
``status_url`` once, and appends the event and that verdict as one JSON line to
``$INCIDENT_LOG`` (default ``incidents.jsonl``). Raising makes the monitor retry
the hook with backoff, so a failure to write is not swallowed here.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp

from monitor.events import Event


async def probe(status_url: str | None, timeout: float = 2.0) -> str:
    """``"answering"`` if the engine still serves HTTP, else why not."""
    if not status_url:
        return "no status_url"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(status_url) as response,
        ):
            return "answering" if response.status == 200 else f"HTTP {response.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"unreachable ({type(exc).__name__})"


def incident(event: Event, verdict: str) -> dict[str, Any]:
    engine = event.engine
    return {
        "event": event.type.value,
        "engine_id": event.engine_id,
        "at": event.time,
        "host": engine.get("host"),
        "pid": engine.get("pid"),
        "status_url": engine.get("status_url"),
        "verdict": verdict,
    }


async def on_engine_lost(event: Event) -> None:
    """Probe the lost engine and record the incident."""
    verdict = await probe(event.engine.get("status_url"))
    line = json.dumps(incident(event, verdict)) + "\n"
    path = Path(os.environ.get("INCIDENT_LOG", "incidents.jsonl"))
    await asyncio.to_thread(_append, path, line)


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line)
