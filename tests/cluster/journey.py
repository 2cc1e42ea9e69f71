"""``make cluster-check``: the README's cluster journey across namespaced machines.

Ten machines (tests/cluster/machines.py) on one bridge, addresses in 198.18.0.0/15:
three ZooKeeper servers, Redis, the monitor, three engines, the site, an SMTP sink.
Steps: a shared crawl on the three engines with owned hosts, counted at the site
(nothing lost, nothing fetched twice, every page on its own host of the site's
``HOSTS``); a project deployed through the monitor; jobs started by name; a URL
pushed to a private address the spider allows; a control call through the monitor
(the engine token only to proven engines at engine_hosts); a kill -9 of an engine, its
engine_lost event and its alert e-mail at the sink. One line per step; exit 0 only if
every step held. Everything it creates is removed at the end, and on Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tests.cluster.cluster import BIN, ENGINES, MACHINES, SITE_PORT, Cluster, http, wait_for
from tests.cluster.site import HOSTS, PAGES, page_paths, page_url

VICTIM = "engine-2"
PROJECT = """from netdisco import Spider


class Leaves(Spider):
    name = "leaves"
    start_urls = ["{first}"]
    allowed_domains = ["{host}"]

    def parse(self, response):
        yield {{"url": response.url}}
"""


class StepFailed(Exception):
    pass


def step(name: str, action: Callable[[], str]) -> None:
    began = time.monotonic()
    try:
        detail = action()
    except Exception as exc:
        print(f"FAIL {name}: {exc!r}", flush=True)
        raise StepFailed(name) from exc
    print(f"ok   {name}: {detail} [{time.monotonic() - began:.1f} s]", flush=True)


class Journey:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.killed_at = 0.0

    def machines(self) -> str:
        self.c.net.build()
        return ", ".join(f"{m} {a}" for m, a in MACHINES.items()) + "; no default route"

    def servers(self) -> str:
        self.c.start_zookeeper()
        modes = {z: self.c.zk_mode(z) for z in ("zk1", "zk2", "zk3")}
        self.c.start_redis()
        self.c.start_site()
        self.c.start_mail()
        self.c.start_monitor()
        return f"ZooKeeper {modes}, Redis, the site, the SMTP sink, the monitor"

    def engines(self) -> str:
        for engine_id in ENGINES:
            self.c.start_engine(engine_id)
        for engine_id in ENGINES:
            self.c.wait_engine(engine_id)

        def all_seen() -> list[str] | None:
            view = http("GET", f"{self.c.monitor}/netdiscovery/monitor")
            seen = sorted(e["id"] for e in view["engines"])
            return seen if seen == sorted(ENGINES) else None

        seen = wait_for("three engines at the monitor", all_seen, 30)

        def running(engine_id: str) -> bool | None:  # an engine serves before its spider runs
            spiders = http("GET", self.c.engine_url(engine_id, "/netdiscovery/spiders"))
            return True if {s["state"] for s in spiders} == {"running"} else None

        for engine_id in ENGINES:  # pausing a spider not running yet is refused (409)
            wait_for(f"{engine_id}'s spider running", partial(running, engine_id), 60)
        return f"the monitor sees {seen}, their spiders running"

    def shared_crawl(self) -> str:
        wait_for("a finished crawl", self.c.crawl_finished, 300, 1.0)
        counts = self.c.counts()
        missing = page_paths() - set(counts)
        twice = {p: n for p, n in counts.items() if n > 1}
        items = self.c.items()
        per_engine = {
            f.name: len(f.read_text().splitlines()) for f in (self.c.work / "items").glob("*")
        }
        # each page on its own host: the tree spread over the site's hosts as meant
        elsewhere = [
            (path, port)
            for _, _, path, port in self.c.fetches()
            if port != SITE_PORT + int(path.rsplit("/", 1)[1]) % HOSTS
        ]
        if missing or twice or len(items) != PAGES or elsewhere:
            raise StepFailed(f"{len(missing)} pages not fetched, {len(twice)} twice, "
                             f"{len(items)} items, {len(elsewhere)} on another host "
                             f"{elsewhere[:3]}")  # fmt: skip
        # Tree sets no download_delay: no spacing between two starts at a host to check
        return (f"{PAGES} pages fetched once each (counted at the site) on {HOSTS} hosts, "
                f"items {per_engine}, pages per engine and host "
                f"(port - {SITE_PORT}) {self.c.hosts_fetched()}")  # fmt: skip

    def deploy(self) -> str:
        project = self.c.work / "leafproj"
        (project / "leafproj").mkdir(parents=True)
        first = page_url(self.c.site, PAGES - 3)
        (project / "leafproj" / "spiders.py").write_text(
            PROJECT.format(first=first, host=MACHINES["site"])
        )
        (project / "pyproject.toml").write_text(
            '[project]\nname = "leafproj"\nversion = "1.0"\ndependencies = []\n'
        )
        out = self.cli("deploy", str(project), "--monitor", self.c.monitor, "--version", "1.0")
        version = json.loads(out)
        return f"leafproj {version['label']} ({version['id'][:12]}), spiders {version['names']}"

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(BIN / "netdisco"), *args], env=self.c.env(), capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise StepFailed(f"netdisco {' '.join(args)}: {done.stdout} {done.stderr}")
        return done.stdout.strip()

    def jobs(self) -> str:
        done = []
        for project, spider in (("leafproj", "leaves"), ("-", "tree")):
            job = self.cli("jobs", "start", project, spider, "--on", "any")

            def finished(job: str = job) -> dict[str, Any] | None:
                shown: dict[str, Any] = json.loads(self.cli("jobs", "show", job))
                if shown["state"] in ("failed", "cancelled", "lost"):
                    raise StepFailed(f"job {job}: {shown}")
                return shown if shown["state"] == "finished" else None

            shown = wait_for(f"job {job} finished", finished, 240, 1.0)
            items = self.cli("jobs", "items", job).splitlines()
            done.append(f"{project} {spider} on {shown.get('engine')}: {len(items)} items")
        return "; ".join(done)

    def control(self) -> str:
        """Mid-crawl, through the monitor (the engine token goes only to a proven engine
        at an engine_hosts address); then URLs pushed to an engine: the site's private
        address passes because the spider names it, Redis's machine is fenced off."""
        base = f"{self.c.monitor}/netdiscovery/monitor/engines/engine-1/spiders/tree"
        paused = http("POST", f"{base}/pause", self.c.monitor_token)
        resumed = http("POST", f"{base}/resume", self.c.monitor_token)
        if (paused["state"], resumed["state"]) != ("paused", "running"):
            raise StepFailed(f"pause, resume through the monitor: {paused}, {resumed}")
        urls = [f"{self.c.site}/p/0", f"http://{MACHINES['redis']}:7379/"]
        pushed = http("POST", self.c.engine_url("engine-3", "/netdiscovery/spiders/tree/requests"),
                      self.c.engine_token, {"urls": urls})  # fmt: skip
        reasons = {r["url"]: r["reason"] for r in pushed["rejected"]}
        fenced = [url for url in urls if "private" in reasons.get(url, "")]
        if fenced != urls[1:]:
            raise StepFailed(f"pushed {urls}: {pushed}")
        return (
            f"pause and resume of engine-1 via the monitor; pushed to engine-3: "
            f"{urls[0]} past the fence ({reasons.get(urls[0], 'accepted')}), "
            f"{urls[1]} refused ({reasons[urls[1]]})"
        )

    def kill(self) -> str:
        self.c.net.kill(VICTIM, signal.SIGKILL)
        self.killed_at = time.monotonic()
        return f"kill -9 {VICTIM} on {MACHINES[ENGINES[VICTIM]]}"

    def engine_lost(self) -> str:
        def lost() -> dict[str, Any] | None:
            found = [e for e in self.c.events() if e["type"] == "engine_lost"]
            return next((e for e in found if e["engine_id"] == VICTIM), None)

        wait_for("engine_lost", lost, 60)
        return f"engine_lost {VICTIM} {time.monotonic() - self.killed_at:.1f} s after the kill"

    def mail(self) -> str:
        def arrived() -> dict[str, Any] | None:
            mails = http("GET", f"{self.c.mails}/mails.json")
            return next((m for m in mails if VICTIM in m["Subject"]), None)

        mail = wait_for("the alert e-mail", arrived, 60)
        took = time.monotonic() - self.killed_at
        return f"to {mail['To']}: {mail['Subject']!r} ({took:.1f} s after the kill)"

    def no_false_events(self) -> str:
        kinds = [(e["type"], e["engine_id"]) for e in self.c.events()]
        lost = [k for k in kinds if k[0] == "engine_lost"]
        if lost != [("engine_lost", VICTIM)]:
            raise StepFailed(f"engine_lost events: {lost}")
        return f"{len(kinds)} events, one engine_lost ({VICTIM})"


def run(journey: Journey) -> None:
    step("machines", journey.machines)
    step("servers", journey.servers)
    step("engines", journey.engines)
    step("control mid-crawl", journey.control)
    step("shared crawl", journey.shared_crawl)
    step("deploy", journey.deploy)
    step("jobs by name", journey.jobs)
    step("kill -9", journey.kill)
    step("engine_lost", journey.engine_lost)
    step("alert e-mail", journey.mail)
    step("no false events", journey.no_false_events)


def main() -> int:
    if os.geteuid() != 0:
        print("make cluster-check needs root (network namespaces)", file=sys.stderr)
        return 2
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="netdisco-netns-"))
    cluster = Cluster(work)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ok = False
    try:
        run(Journey(cluster))
        ok = True
    except (StepFailed, KeyboardInterrupt):
        pass
    finally:
        cluster.net.close()
    verdict = "passed" if ok else f"FAILED (logs in {work / 'logs'})"
    print(f"cluster-check {verdict} in {time.monotonic() - began:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
