"""A flood of one asyncio error is logged once per 10 s (issue 27, finding 8).

Out of descriptors, asyncio logs every failed ``accept()``: 1.95 M lines in 12 s
were measured. The next line let through says how many were held back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest
import structlog

from netdisco import logs


@pytest.fixture
def configured() -> Iterator[None]:
    """The logging defaults back after a test that ran ``logs.configure``."""
    yield
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()
    for f in list(logging.getLogger("asyncio").filters):
        logging.getLogger("asyncio").removeFilter(f)


def test_a_flood_of_accept_errors_is_logged_once_per_window(
    configured: object, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    logs.configure(json=True)  # here: the captured stderr of the test's call
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    asyncio_log = logging.getLogger("asyncio")
    for _ in range(10_000):
        asyncio_log.error("socket.accept() out of system resource")
    clock[0] += 11.0
    asyncio_log.error("socket.accept() out of system resource")
    err = capfd.readouterr().err.splitlines()
    lines = [json.loads(line) for line in err if line.startswith("{")]
    assert [line["event"] for line in lines] == [
        "socket.accept() out of system resource",
        "socket.accept() out of system resource (9999 more like it in the last 10 s)",
    ]
