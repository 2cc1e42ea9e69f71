"""An embedded engine logs like a library: the application's logging set-up decides.

Each case runs ``logging_app`` (its own process, stdlib logging configured by the app)
against the engine tests' real site and a ZooKeeper port nothing listens on.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from netdisco.testing import free_port
from tests.monitor.conftest import REPO


async def run_app(level: str, url: str) -> tuple[list[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.netdisco.logging_app", level, str(free_port()), url,
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    return out.decode().splitlines(), err.decode().splitlines()


@pytest.mark.parametrize("level", ["WARNING", "INFO"])
async def test_the_host_applications_logging_is_honoured(site, level):
    out, err = await run_app(level, f"{site}/fast/p/1")
    assert out == ["RESULT finished {'ValueError': 1} True"]  # nothing of netdisco's
    started = [line for line in err if "engine_started" in line]
    if level == "WARNING":
        assert started == []  # info lines held back by the app's level
    else:
        assert started
        assert started[0].startswith("INFO:netdisco.engine.engine:engine_started")
    errors = [line for line in err if line.startswith("ERROR:netdisco.crawl.scraper:")]
    assert len(errors) == 1, err
    assert "callback_error" in errors[0]
    assert "Traceback (most recent call last):" in err
    assert not [line for line in err if "hunter2" in line or "locals" in line], err
    dropped = [line for line in err if "Connection dropped" in line]
    assert 1 <= len(dropped) <= 2, dropped  # kazoo's reconnect chatter, folded
