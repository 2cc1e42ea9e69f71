"""A real Prometheus server (Debian's ``prometheus``) scrapes an engine and the monitor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from netdisco.testing import eventually
from tests.monitor.service_support import real_engine, steering
from tests.prom_support import PROMETHEUS, PrometheusServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None, reason="prometheus absent (make system-deps installs it)"
    ),
]


async def test_prometheus_scrapes_an_engine_and_the_monitor(
    zk_hosts: str, start_monitor: Any, site: str, tmp_path: Path
) -> None:
    engine = await real_engine(zk_hosts, site, "scraped")
    server: PrometheusServer | None = None
    try:
        monitor, _ = await start_monitor(steering(zk_hosts))
        targets = [f"127.0.0.1:{engine.port}", f"127.0.0.1:{monitor.http.port}"]
        server = PrometheusServer(tmp_path, targets)
        server.start()

        async def both_up() -> list[dict[str, Any]] | None:
            up = await server.query("up")
            return up if len(up) == 2 and all(r["value"][1] == "1" for r in up) else None

        up = await eventually(both_up, what="both targets up in Prometheus", timeout=120)
        assert {r["metric"]["instance"] for r in up} == set(targets)

        async def pages() -> list[dict[str, Any]]:
            query = 'netdisco_responses_total{spider="slowtree",code="200"} > 0'
            return await server.query(query)

        (sample,) = await eventually(pages, what="responses of the engine in Prometheus")
        assert sample["metric"]["instance"] == targets[0]
        running = await eventually(
            lambda: server.query('netdisco_monitor_engines{state="running"} == 1'),
            what="the monitor's engines by state in Prometheus",
        )
        assert running[0]["metric"]["instance"] == targets[1]
    finally:
        if server is not None:
            server.stop()
        await engine.stop(deadline=1)
