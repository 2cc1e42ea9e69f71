"""The cluster on namespaced machines: a 3-server ZooKeeper ensemble, Redis, an SMTP sink,
the monitor, three engines and the counting site, configured as production would be
(an engine token, a monitor token, a deploy token, a ZooKeeper digest).

The site is ``HOSTS`` hosts (ports from ``SITE_PORT`` up on its machine, see
tests/cluster/site.py) and the engines share the crawl with owned hosts
(``politeness=owner`` in their frontier URL): each host is crawled by one engine at a
time, so every engine has hosts of its own to crawl.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from netdisco.testing import ZK_CONF_DIR, ZK_JAR, zookeeper_mode
from netdisco.testing import wait_for as poll
from tests.cluster.machines import Network
from tests.cluster.site import SITE_ENV, Fetch, site_ports

T = TypeVar("T")
MACHINES = {
    "zk1": "198.18.0.11", "zk2": "198.18.0.12", "zk3": "198.18.0.13",
    "redis": "198.18.0.21", "monitor": "198.18.0.31",
    "e1": "198.18.0.41", "e2": "198.18.0.42", "e3": "198.18.0.43",
    "site": "198.18.0.51", "mail": "198.18.0.61",
}  # fmt: skip
ZKS = ("zk1", "zk2", "zk3")
ENGINES = {"engine-1": "e1", "engine-2": "e2", "engine-3": "e3"}
ZK_PORT, REDIS_PORT, MONITOR_PORT, ENGINE_PORT = 7181, 7379, 7316, 7715
SITE_PORT, SMTP_PORT, MAIL_WEB_PORT = 7080, 7025, 7026  # the site: SITE_PORT + 0..HOSTS-1
#: the frontier URL's options every engine of the shared crawl uses
FRONTIER_OPTIONS = "politeness=owner"
SESSION_TIMEOUT = 4.0
BIN = Path(sys.executable).parent
CHECKOUT = Path(__file__).resolve().parents[2]


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.2) -> T:
    """``netdisco.testing.wait_for``, typed: poll ``probe`` until it returns something."""
    result: T = poll(what, probe, timeout, every)
    return result


def http(method: str, url: str, token: str | None = None, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


class Cluster:
    def __init__(self, work: Path, broken: str = "") -> None:
        self.work = work
        self.broken = broken  # NDC_BREAK: "unfenced" engines or an "inventive" monitor
        self.net = Network(MACHINES, work / "logs")
        self.engine_token = secrets.token_hex(16)
        self.monitor_token = secrets.token_hex(16)
        self.deploy_token = secrets.token_hex(16)
        self.digest = f"netdisco:{secrets.token_hex(12)}"
        self.zk_hosts = ",".join(f"{MACHINES[z]}:{ZK_PORT}" for z in ZKS)
        self.redis_url = f"redis://{MACHINES['redis']}:{REDIS_PORT}/0"
        self.site = f"http://{MACHINES['site']}:{SITE_PORT}"  # its first host
        self.monitor = f"http://{MACHINES['monitor']}:{MONITOR_PORT}"
        self.mails = f"http://{MACHINES['mail']}:{MAIL_WEB_PORT}"

    def env(self) -> dict[str, str]:
        """What every process gets: the secrets by variable, never on a command line."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
        return env | {
            "NETDISCO_TOKEN": self.engine_token,
            "NDC_MONITOR_TOKEN": self.monitor_token,
            "NETDISCO_MONITOR_TOKEN": self.monitor_token,
            "NETDISCO_DEPLOY_TOKEN": self.deploy_token,
            "NDC_ZK_DIGEST": self.digest,
            "NETDISCO_MONITOR": self.monitor,
            SITE_ENV: self.site,
            "PYTHONPATH": str(CHECKOUT),
        }

    # -- servers -------------------------------------------------------------------------

    def start_zookeeper(self) -> None:
        for i, machine in enumerate(ZKS, 1):
            self.start_zk(i, machine)
        for machine in ZKS:
            wait_for(f"ZooKeeper on {machine}", partial(self.zk_mode, machine), 90, 0.5)

    def start_zk(self, i: int, machine: str) -> None:
        home = self.work / machine
        (home / "data").mkdir(parents=True, exist_ok=True)
        (home / "data" / "myid").write_text(f"{i}\n")
        peers = "".join(f"server.{j}={MACHINES[z]}:7888:7889\n" for j, z in enumerate(ZKS, 1))
        cfg = home / "zoo.cfg"
        cfg.write_text(
            f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={home / 'data'}\n"
            f"clientPort={ZK_PORT}\nclientPortAddress={MACHINES[machine]}\n"
            "admin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n"
            "minSessionTimeout=1000\n" + peers
        )
        main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        self.net.spawn(
            machine, machine,
            ["java", "-Xmx160m", "-cp", f"{ZK_CONF_DIR}:{ZK_JAR}", main, str(cfg)], self.env(),
        )  # fmt: skip

    def zk_mode(self, machine: str) -> str | None:
        """``leader``/``follower`` while the server serves (asked from the hub)."""
        return zookeeper_mode(MACHINES[machine], ZK_PORT)

    def start_redis(self) -> None:
        self.net.spawn(
            "redis", "redis",
            ["redis-server", "--bind", MACHINES["redis"], "--port", str(REDIS_PORT),
             "--save", "", "--appendonly", "no", "--protected-mode", "no"], self.env(),
        )  # fmt: skip
        wait_for("Redis", lambda: self.redis_cli("ping") == "PONG" or None, 30)

    def redis_cli(self, *args: str) -> str:
        done = subprocess.run(
            ["redis-cli", "-h", MACHINES["redis"], "-p", str(REDIS_PORT), *args],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        return done.stdout.strip()

    def start_site(self) -> None:
        argv = [sys.executable, "-m", "tests.cluster.site", "--host", MACHINES["site"],
                "--port", str(SITE_PORT)]  # fmt: skip
        self.net.spawn("site", "site", argv, self.env())
        for port in site_ports(SITE_PORT):
            url = f"http://{MACHINES['site']}:{port}/counts"
            wait_for(f"the site on port {port}", partial(http, "GET", url), 30)

    def start_mail(self) -> None:
        code = (
            "import asyncio; from netdisco.demo.site import serve_sink; "
            f"asyncio.run(serve_sink({SMTP_PORT}, {MAIL_WEB_PORT}, {MACHINES['mail']!r}))"
        )
        self.net.spawn("mail", "mail", [sys.executable, "-c", code], self.env())
        wait_for("the SMTP sink", lambda: http("GET", f"{self.mails}/mails.json"), 30)

    def monitor_toml(self) -> str:
        hosts = ", ".join(f'"{MACHINES[m]}"' for m in ENGINES.values())
        return (
            f'[zookeeper]\nhosts = "{self.zk_hosts}"\nsession_timeout = {SESSION_TIMEOUT}\n'
            'digest_env = "NDC_ZK_DIGEST"\n\n'
            f'[http]\nhost = "{MACHINES["monitor"]}"\nport = {MONITOR_PORT}\n\n'
            '[control]\ntoken_env = "NETDISCO_TOKEN"\nmonitor_token_env = "NDC_MONITOR_TOKEN"\n'
            f'deploy_token_env = "NETDISCO_DEPLOY_TOKEN"\nengine_hosts = [{hosts}]\n\n'
            "[alerts]\ngrace = 1.0\nbatch_window = 0.5\n\n"
            f'[email]\nhost = "{MACHINES["mail"]}"\nport = {SMTP_PORT}\n'
            'sender = "monitor@cluster.invalid"\nto = ["ops@cluster.invalid"]\n'
            'events = ["engine_lost"]\n\n[log]\njson = true\n'
        )

    def start_monitor(self) -> None:
        config = self.work / "monitor.toml"
        config.write_text(self.monitor_toml())
        argv = [*self._command("netdisco-monitor", "inventive"), "--config", str(config),
                "--state-file", str(self.work / "monitor-state.json")]  # fmt: skip
        self.net.spawn("monitor", "monitor", argv, self.env())
        wait_for("the monitor", lambda: http("GET", f"{self.monitor}/netdiscovery/health"), 60)

    def frontier(self, extra: str = "") -> str:
        """The engines' frontier URL: Redis with ``FRONTIER_OPTIONS`` and ``extra``
        (more options, with or without their leading ``?``)."""
        query = "&".join(q for q in (FRONTIER_OPTIONS, extra.lstrip("?&")) if q)
        return f"{self.redis_url}?{query}"

    def engine_toml(self, engine_id: str, crawl: bool, extra: str = "") -> str:
        machine = ENGINES[engine_id]
        text = (
            f'[engine]\nid = "{engine_id}"\nhost = "{MACHINES[machine]}"\nport = {ENGINE_PORT}\n'
            'token_env = "NETDISCO_TOKEN"\nmax_jobs = 2\n'
            'spider_modules = ["tests.cluster.site"]\n'
            f'jobs_dir = "{self.work / machine / "jobs"}"\n\n'
            f'[zookeeper]\nhosts = "{self.zk_hosts}"\nsession_timeout = {SESSION_TIMEOUT}\n'
            'digest_env = "NDC_ZK_DIGEST"\n'
        )
        if crawl:
            feed = self.work / "items" / "tree-{engine}.jsonl"
            text += (
                '\n[[spiders]]\nspider = "tests.cluster.site:Tree"\n\n[spiders.settings]\n'
                f'frontier = "{self.frontier(extra)}"\n\n[spiders.settings.feeds."{feed}"]\n'
            )
        return text

    def start_engine(self, engine_id: str, crawl: bool = True, extra: str = "") -> None:
        machine = ENGINES[engine_id]
        config = self.work / machine / "engine.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(self.engine_toml(engine_id, crawl, extra))
        argv = [*self._command("netdisco", "unfenced"), "--log-json", "engine", "--config",
                str(config)]  # fmt: skip
        self.net.spawn(engine_id, machine, argv, self.env() | {"UV_OFFLINE": "1"})

    def _command(self, script: str, broken: str) -> list[str]:
        """The CLI, or its deliberately broken twin (tests/cluster/broken.py)."""
        if self.broken == broken:
            return [sys.executable, "-m", "tests.cluster.broken", broken]
        return [str(BIN / script)]

    def engine_url(self, engine_id: str, path: str) -> str:
        return f"http://{MACHINES[ENGINES[engine_id]]}:{ENGINE_PORT}{path}"

    def crawl_finished(self) -> bool | None:
        """True once every engine's spiders are finished (None: not yet, for wait_for)."""
        states = {
            s["state"]
            for e in ENGINES
            for s in http("GET", self.engine_url(e, "/netdiscovery/spiders"))
        }
        return True if states == {"finished"} else None

    def wait_engine(self, engine_id: str, timeout: float = 60) -> None:
        url = self.engine_url(engine_id, "/netdiscovery/health")
        wait_for(f"{engine_id} healthy", lambda: http("GET", url), timeout)

    def events(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = http("GET", f"{self.monitor}/netdiscovery/events?limit=1000")[
            "events"
        ]
        return found

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = http("GET", f"{self.site}/counts")
        return found

    def fetches(self) -> list[Fetch]:
        """Every fetch at the site: (time, client address, path, port)."""
        return [(t, a, p, port) for t, a, p, port in http("GET", f"{self.site}/fetches")]

    def hosts_fetched(self) -> dict[str, dict[int, int]]:
        """Per engine (by its machine's address), pages it fetched per host of the site
        (the port's offset from ``SITE_PORT``)."""
        names = {MACHINES[machine]: engine for engine, machine in ENGINES.items()}
        per: dict[str, dict[int, int]] = {}
        for _, address, _, port in self.fetches():
            hosts = per.setdefault(names.get(address, address), {})
            hosts[port - SITE_PORT] = hosts.get(port - SITE_PORT, 0) + 1
        return {engine: dict(sorted(hosts.items())) for engine, hosts in sorted(per.items())}

    def items(self) -> list[str]:
        urls = []
        for feed in sorted((self.work / "items").glob("*.jsonl")):
            for line in feed.read_text().splitlines():
                if line.strip():
                    urls.append(json.loads(line)["url"])
        return urls
