"""Failed requests of one spider, gathered from every engine that runs it.

Each engine keeps its spider's failed requests (``GET .../spiders/{name}/failed``);
the dashboard wants them per spider across engines. A shared frontier (the same
``crawl`` in the znodes) keeps one store for all its engines, so it is read once.
Only a GET with a timeout to the ``status_url`` each engine advertised, never with
a token; answers are read up to :data:`monitor.status.MAX_ANSWER` and every field is
checked and cut before it is shown. Retrying goes through :mod:`monitor.control`.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import aiohttp

from monitor.rules import count, name, text
from monitor.status import asking, check_engine, read_json, spiders_url
from netdisco.cluster.membership import Member

#: entries shown per engine, and the longest URL kept
LIMIT = 50
MAX_URL = 2000
_FIELDS = ("id", "method", "reason", "message", "error")


def entry(raw: Any) -> dict[str, Any] | None:
    """One failed request as shown: known fields, checked and cut; None if unusable."""
    if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
        return None
    out: dict[str, Any] = {"url": raw["url"][:MAX_URL]}
    out.update({key: text(raw.get(key)) for key in _FIELDS})
    out.update(status=count(raw.get("status")), attempts=count(raw.get("attempts")))
    last = raw.get("last_at")
    out["last_at"] = last if isinstance(last, int | float) and not isinstance(last, bool) else None
    return out


def summary(engine_id: str, body: Any) -> dict[str, Any]:
    """One engine's answer, checked: total, counts by reason, the first entries."""
    if not isinstance(body, dict):
        return {"engine": engine_id, "error": "not a JSON object"}
    reasons = body.get("by_reason")
    by_reason = {}
    for reason, n in list(reasons.items())[:LIMIT] if isinstance(reasons, dict) else []:
        if name(reason) is not None and count(n) is not None:
            by_reason[reason] = n
    entries = body.get("failed")
    kept = [e for e in map(entry, entries[:LIMIT] if isinstance(entries, list) else []) if e]
    total, dropped = count(body.get("total")), count(body.get("dropped"))
    return {"engine": engine_id, "total": total, "dropped": dropped, "by_reason": by_reason,
            "failed": kept}  # fmt: skip


def readers(members: list[Member], spider: str) -> list[Member]:
    """The engines to ask about ``spider``: those that run it, one per shared crawl."""
    chosen, crawls = [], set()
    for member in members:
        listed = member.data.get("spiders")
        entries = listed if isinstance(listed, list) else []
        mine = [s for s in entries if isinstance(s, dict) and s.get("name") == spider]
        if not mine:
            continue
        crawl = name(mine[0].get("crawl"))
        if crawl is not None:
            if crawl in crawls:
                continue
            crawls.add(crawl)
        chosen.append(member)
    return chosen


class Failed:
    """Reads one spider's failed requests from the engines of the view."""

    def __init__(self, timeout: float = 3.0) -> None:
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def gather(self, members: list[Member], spider: str) -> dict[str, Any]:
        """``{"spider", "total", "by_reason", "engines": [...]}`` over every engine asked."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        asked = readers(members, spider)
        engines = await asyncio.gather(*(self._one(m, spider) for m in asked))
        by_reason: dict[str, int] = {}
        for one in engines:
            for reason, n in one.get("by_reason", {}).items():
                by_reason[reason] = by_reason.get(reason, 0) + n
        total = sum(one.get("total") or 0 for one in engines)
        return {"spider": spider, "total": total, "by_reason": by_reason, "engines": engines}

    async def _one(self, member: Member, spider: str) -> dict[str, Any]:
        base = spiders_url(member.payload.status_url or "")
        if base is None or self._session is None:
            return {"engine": member.name, "error": "no HTTP status URL"}
        url = f"{base}/{quote(spider, safe='')}/failed?limit={LIMIT}"
        try:
            async with self._session.get(url, headers=asking(member.name)) as resp:
                check_engine(resp, member.name)
                resp.raise_for_status()
                return summary(member.name, await read_json(resp))
        except Exception as exc:  # whatever an engine answers, the others are still shown
            return {"engine": member.name, "error": type(exc).__name__}
