"""Waiting for something to happen, shared by ``netdisco demo`` and the tests (internal).

``eventually`` polls a check until it returns something truthy; ``get_json`` is the
check one usually polls: a JSON endpoint that does not answer yet gives None.
Tests reach both through ``netdisco.testing``; nothing here imports netdisco.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

import aiohttp


async def eventually(
    check: Callable[[], Any],
    what: str = "",
    *,
    timeout: float = 60.0,
    interval: float = 0.02,
    error: Callable[[str], Exception] = AssertionError,
) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy, and return that.

    After ``timeout`` seconds raise ``error`` (AssertionError, for tests) naming ``what``.
    In tests the deadline is generous on purpose: it only decides how long a broken
    test takes to fail, never whether a working one passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"{what or check} did not happen within {timeout:g} s")
        await asyncio.sleep(interval)


def wait_for(
    what: str,
    probe: Callable[[], Any],
    timeout: float,
    every: float = 0.2,
    error: Callable[[str], Exception] = TimeoutError,
) -> Any:
    """``eventually`` for code without a loop (harnesses driving processes): poll
    ``probe`` until it returns something not None; errors count as not yet, and the
    last one is named when ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = probe()
        except Exception as exc:
            result, last = None, exc
        if result is not None:
            return result
        time.sleep(every)
    raise error(f"no {what} within {timeout:.0f} s" + (f" (last error: {last})" if last else ""))


async def get_json(session: aiohttp.ClientSession, url: str, timeout: float = 2.0) -> Any:
    """The JSON at ``url``, or None while the server is not (yet) answering 200."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            return await response.json() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None
