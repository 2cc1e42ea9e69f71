"""The fault suite: real ZooKeeper (standalone, and a 3-server ensemble), a delay proxy.

Run with ``make faults`` (``NETDISCO_FAULTS=1``); a plain ``pytest`` skips it, so
``make test`` stays fast. At the end it prints one table: scenario, runs,
expected events, false events, lost events.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.faults.table import ROWS, render


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("NETDISCO_FAULTS") == "1":
        return
    skip = pytest.mark.skip(reason="the fault suite runs with `make faults`")
    for item in items:
        if "tests/faults/" in str(item.fspath):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.write_sep("=", "fault suite")
        terminalreporter.write_line(render())
