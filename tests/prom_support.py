"""Debian's Prometheus for the tests: ``promtool check metrics``, and a real server on loopback."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from netdisco.testing import free_port

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool absent (Debian's prometheus; make system-deps installs it)"
)


def promtool_check(text: str) -> tuple[int, str]:
    """``promtool check metrics`` on ``text``: its exit code and what it complained of."""
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout + done.stderr


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (host:port on loopback) every second; stopped by pid."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        self.port = free_port()
        self.workdir = workdir
        config = workdir / "prometheus.yml"
        scrape = {"job_name": "netdisco", "scrape_interval": "1s", "scrape_timeout": "1s",
                  "static_configs": [{"targets": targets}]}  # fmt: skip
        config.write_text(
            json.dumps({"global": {"evaluation_interval": "1s"}, "scrape_configs": [scrape]})
        )  # fmt: skip (JSON is YAML)
        self.proc: subprocess.Popen[bytes] | None = None
        self.argv = [
            str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
        ]  # fmt: skip

    def start(self) -> None:
        with (self.workdir / "prometheus.log").open("wb") as log:  # the child keeps its own fd
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    async def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query through the HTTP API; [] while the server is not up yet."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query"
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
                session.get(url, params={"query": expression}) as resp,
            ):
                body = await resp.json()
        except (aiohttp.ClientError, TimeoutError):
            return []
        assert body["status"] == "success", body
        return list(body["data"]["result"])
