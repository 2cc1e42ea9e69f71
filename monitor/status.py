"""Polls each engine's HTTP endpoint for its crawl rate, for the dashboard.

Only a GET with a short timeout, never with credentials, and only to the
``status_url`` the engine itself advertised. A failed poll shows as "unknown":
membership is ZooKeeper's business, never this poller's. Answers are read up to
:data:`MAX_ANSWER` bytes (:func:`read_json`), so whatever a ``status_url`` serves,
the monitor's memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from netdisco.cluster.contract import ENGINE_HEADER
from netdisco.cluster.membership import Member
from netdisco.exceptions import AnswerTooLarge, WrongEngine

log = structlog.get_logger(__name__)

#: The most of an engine's answer the monitor reads (a spider list is a few KiB).
MAX_ANSWER = 1 << 20


async def read_json(resp: aiohttp.ClientResponse, limit: int = MAX_ANSWER) -> Any:
    """The JSON of an answer of at most ``limit`` bytes; ``AnswerTooLarge`` beyond.

    Read in chunks and stopped at the cap (also for a compressed body, which is
    counted decompressed), never ``resp.json()`` on whatever comes.
    """
    if resp.content_length is not None and resp.content_length > limit:
        raise AnswerTooLarge(f"{resp.url} answers {resp.content_length} bytes (cap {limit})")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > limit:
            raise AnswerTooLarge(f"{resp.url} answers more than {limit} bytes")
    return json.loads(body)


def asking(engine_id: str) -> dict[str, str]:
    """The header that names the engine a request is meant for (refused by any other)."""
    return {ENGINE_HEADER: engine_id}


def check_engine(resp: aiohttp.ClientResponse, engine_id: str) -> None:
    """``WrongEngine`` unless the answer names ``engine_id`` as the engine that gave it:
    the address an engine advertised may be served by another one (a port taken over)."""
    said = resp.headers.get(ENGINE_HEADER)
    if said != engine_id:
        raise WrongEngine(f"{resp.url} answered as engine {said!r}, not as {engine_id!r}")


@dataclass(frozen=True)
class Rate:
    """An engine's pages per second (all spiders), when it was read, or why not."""

    pages_per_second: float | None
    at: float
    error: str | None = None


def spiders_url(status_url: str) -> str | None:
    """``.../netdiscovery/engine`` -> ``.../netdiscovery/spiders`` (where the rates are)."""
    if not status_url.startswith(("http://", "https://")):
        return None
    base = status_url.split("#", 1)[0].rstrip("/")
    if base.endswith("/engine"):
        return base[: -len("engine")] + "spiders"
    return None


def total_rate(body: Any) -> float:
    """Sum of ``pages_per_second`` over a spider list (the engines' spider status objects)."""
    spiders = body.get("spiders", body) if isinstance(body, dict) else body
    if not isinstance(spiders, list):
        raise ValueError("no spider list in the answer")
    if not all(isinstance(s, dict) for s in spiders):
        raise ValueError("a spider entry is not an object")
    return round(sum(float(s.get("pages_per_second") or 0.0) for s in spiders), 2)


class StatusPoller:
    """Every ``interval`` s, reads the rate of every engine in ``members()``."""

    def __init__(
        self,
        members: Callable[[], list[Member]],
        interval: float,
        timeout: float = 2.0,
        on_body: Callable[[str, Any], None] | None = None,  # each answer read, e.g. History
        on_dropped: Callable[[str], None] | None = None,  # ("status"): an answer too big
    ) -> None:
        self.members = members
        self.on_body = on_body
        self.on_dropped = on_dropped
        self.interval = interval
        self.timeout = timeout
        self.rates: dict[str, Rate] = {}
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.create_task(self._run(), name="monitor-status-poller")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        self._session = aiohttp.ClientSession(timeout=timeout)
        while True:
            members = self.members()
            await asyncio.gather(*(self._poll(m) for m in members))
            present = {m.name for m in members}
            self.rates = {k: v for k, v in self.rates.items() if k in present}
            await asyncio.sleep(self.interval)

    async def _poll(self, member: Member) -> None:
        url = spiders_url(member.payload.status_url or "")
        if url is None or self._session is None:
            return
        try:
            async with self._session.get(url, headers=asking(member.name)) as resp:
                check_engine(resp, member.name)
                resp.raise_for_status()
                body = await read_json(resp)
                rate = total_rate(body)
            self.rates[member.name] = Rate(rate, time.time())
            if self.on_body is not None:
                self.on_body(member.name, body)
        except WrongEngine as exc:
            self.rates[member.name] = Rate(None, time.time(), error="wrong_engine")
            log.warning("status_wrong_engine", engine_id=member.name, reason=str(exc))
        except AnswerTooLarge as exc:
            self.rates[member.name] = Rate(None, time.time(), error=type(exc).__name__)
            log.warning("status_answer_dropped", engine_id=member.name, reason=str(exc))
            if self.on_dropped is not None:
                self.on_dropped("status")
        except Exception as exc:  # whatever an engine answers, the poller keeps polling
            self.rates[member.name] = Rate(None, time.time(), error=type(exc).__name__)
