"""``make compose-check``: the compose stack built, brought up, crawled, broken and checked.

Run as root on Debian. Installs what is missing (docker.io, docker-compose, debootstrap),
starts dockerd if none runs, builds a Debian base image (cached), builds every image from
compose/, brings up docker-compose.yml with docker-compose.check.yml on top (host network,
loopback addresses only), checks that three engines crawl the demo site on the Redis
frontier, kills one, checks the monitor's engine_lost event, the alert e-mail and that
every page still has its item, and takes everything down again. One line per step;
exit 0 only if every step held.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import hostprep
from stack import Stack, docker, get_json

from netdisco.demo.site import PAGES, SECTIONS
from netdisco.testing import wait_for as poll

ENGINES = ["engine-1", "engine-2", "engine-3"]
VICTIM = "engine-2"
ENGINE_PORT, MONITOR_PORT, MAIL_API_PORT = 8715, 8316, 8025
NETDISCO_IMAGE = "netdisco:dev"
T = TypeVar("T")


class StepFailed(Exception):
    pass


def wait_for(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll ``probe`` once a second until it returns something (errors count as not yet)."""
    result: T = poll(what, probe, timeout, every=1.0, error=StepFailed)
    return result


@dataclass
class Check:
    """The steps, in order; each returns the detail of its line."""

    dockerd: hostprep.Dockerd = field(default_factory=hostprep.Dockerd)
    stack: Stack | None = None
    killed_at: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def step(self, name: str, action: Callable[[], str]) -> None:
        began = time.monotonic()
        try:
            detail = action()
        except Exception as exc:
            print(f"FAIL {name}: {exc}", flush=True)
            raise StepFailed(name) from exc
        print(f"ok   {name}: {detail} [{time.monotonic() - began:.0f} s]", flush=True)

    def base_and_stack(self) -> str:
        base, detail = hostprep.base_image()
        self.stack = Stack(base, secrets.token_hex(24))
        self.stack.render()
        return detail

    @property
    def s(self) -> Stack:
        assert self.stack is not None
        return self.stack

    def build(self) -> str:
        self.s.build()
        size = int(docker("image", "inspect", "--format", "{{.Size}}", NETDISCO_IMAGE))
        return f"images built from compose/; {NETDISCO_IMAGE} is {size / 1e6:.0f} MB"

    def free(self) -> str:
        taken = self.s.taken()
        if taken:
            raise StepFailed("already in use: " + ", ".join(taken))
        return "every address the stack listens on is free: " + ", ".join(
            sorted(set(self.s.hosts.values()))
        )

    def up(self) -> str:
        self.s.compose("up", "-d", "--no-build")
        return f"docker-compose up -d: {len(self.s.health())} containers"

    def healthy(self) -> str:
        def probe() -> dict[str, str] | None:
            health = self.s.health()
            return health if health and set(health.values()) == {"healthy"} else None

        health = wait_for("healthy stack", probe, 180)
        return f"all {len(health)} healthy: {', '.join(sorted(health))}"

    def spiders(self, engine: str) -> list[dict[str, Any]]:
        url = self.s.url(engine, ENGINE_PORT, "/netdiscovery/spiders")
        result: list[dict[str, Any]] = get_json(url)
        return result

    def crawling(self) -> str:
        view = get_json(self.s.url("monitor", MONITOR_PORT, "/netdiscovery/monitor"))
        registered = sorted(e["id"] for e in view["engines"])
        if registered != ENGINES:
            raise StepFailed(f"the monitor sees {registered}, not {ENGINES}")
        spiders = [s for e in ENGINES for s in self.spiders(e)]
        states = {s["state"] for s in spiders}
        items = sum(s["items"] for s in spiders)
        if states != {"running"} or not 0 < items < PAGES * len(SECTIONS):
            raise StepFailed(f"not mid-crawl: spider states {states}, {items} items")
        redis = self.s.container("redis")
        keys = docker("exec", redis, "redis-cli", "-h", self.s.hosts["redis"], "dbsize").strip()
        if int(keys) == 0:
            raise StepFailed("Redis holds no key: the engines do not share its frontier")
        seen = {s["name"]: s["seen"] for s in self.spiders(ENGINES[0])}
        return (
            f"monitor sees {', '.join(registered)}; {len(spiders)} spiders running, "
            f"{items} items so far; Redis frontier: {keys} keys, seen {seen}"
        )

    def kill(self) -> str:
        container = self.s.container(VICTIM)
        docker("kill", container)
        self.killed_at = time.monotonic()
        return f"docker kill {VICTIM} ({container})"

    def engine_lost(self) -> str:
        def probe() -> dict[str, Any] | None:
            url = self.s.url("monitor", MONITOR_PORT, "/netdiscovery/events?limit=1000")
            events = get_json(url)["events"]
            lost = [e for e in events if e["type"] == "engine_lost"]
            return next((e for e in lost if e["engine_id"] == VICTIM), None)

        event = wait_for("engine_lost event", probe, 90)
        took = time.monotonic() - self.killed_at
        when = f"{event['time_iso']} ({took:.0f} s after the kill)"
        return f"monitor event engine_lost {event['engine_id']} at {when}"

    def mail(self) -> str:
        def probe() -> dict[str, Any] | None:
            messages = get_json(self.s.url("mailpit", MAIL_API_PORT, "/api/v1/messages"))
            return next(
                (m for m in messages["messages"] if f"engine_lost: {VICTIM}" in m["Subject"]),
                None,
            )

        message = wait_for("alert e-mail", probe, 90)
        took = time.monotonic() - self.killed_at
        to = ", ".join(r["Address"] for r in message["To"])
        return f"alert e-mail to {to}: {message['Subject']!r} ({took:.0f} s after the kill)"

    def complete(self) -> str:
        survivors = [e for e in ENGINES if e != VICTIM]

        def probe() -> bool | None:
            states = {s["state"] for e in survivors for s in self.spiders(e)}
            return True if states == {"finished"} else None

        wait_for("finished crawl", probe, 600)
        items = list(self.s.items(ENGINES))
        missing, duplicates = lost_pages(items)
        if missing:
            raise StepFailed(f"{len(missing)} pages have no item, e.g. {sorted(missing)[:5]}")
        took = time.monotonic() - self.killed_at
        return (
            f"every spider of {', '.join(survivors)} finished {took:.0f} s after the kill; "
            f"all {PAGES * len(SECTIONS)} pages have an item ({len(items)} items from "
            f"{len(ENGINES)} engines, {duplicates} pages crawled twice)"
        )

    def down(self) -> str:
        self.s.compose("down", "-v", "--remove-orphans")
        left = self.s.leftovers()
        if left:
            raise StepFailed("left behind: " + ", ".join(left))
        return "docker-compose down -v: no container, network or volume of the stack left"


def lost_pages(items: list[dict[str, Any]]) -> tuple[set[str], int]:
    """Pages without an item, and how many pages have more than one."""
    wanted = {f"/{section}/{n}" for section in SECTIONS for n in range(PAGES)}
    paths = [urlsplit(item["url"]).path for item in items]
    return wanted - set(paths), len(paths) - len(set(paths))


def run(check: Check) -> None:
    check.step("packages", hostprep.install_packages)
    check.step("dockerd", check.dockerd.start)
    check.step("base image", check.base_and_stack)
    check.step("build", check.build)
    check.step("loopback", check.free)
    try:
        check.step("up", check.up)
        check.step("healthy", check.healthy)
        check.step("crawling", check.crawling)
        check.step("kill", check.kill)
        check.step("engine_lost", check.engine_lost)
        check.step("alert e-mail", check.mail)
        check.step("crawl complete", check.complete)
    finally:
        check.step("down", check.down)


def main() -> int:
    check = Check()
    ok = False
    try:
        run(check)
        ok = True
    except StepFailed:
        pass
    finally:
        if check.stack is not None:
            check.stack.close()
        try:
            check.step("dockerd stop", check.dockerd.stop)
        except StepFailed:
            ok = False
    verdict = "passed" if ok else "FAILED"
    print(f"compose-check {verdict} in {time.monotonic() - check.started:.0f} s", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
