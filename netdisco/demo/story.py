"""``netdisco demo``: a live cluster on loopback in about half a minute, told as it happens.

What a newcomer sees, in order: ZooKeeper, a generated website and an SMTP sink
start; the monitor starts *before* the engines, because its first listing is a
silent baseline, so each engine that registers afterwards shows up as
``engine_joined``; three engines crawl a section of the site each (pages/s read
from their status endpoints); then one engine gets SIGTERM (``engine_left``: it
deregisters itself) and another SIGKILL (``engine_lost`` once its ZooKeeper
session expires), and the monitor's alert e-mail is printed as the sink receives it.

Everything it starts is either served from this process or a child process in
its own process group, known by pid; ``finally`` blocks stop them (SIGTERM, then
SIGKILL), and SIGINT, SIGTERM or SIGHUP turn into a cancellation of the flow,
so that Ctrl-C at any moment leaves nothing running. Child logs go to
``<out>/logs/``, items to ``<out>/items/``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import aiohttp

from netdisco.demo_site import ITEMS_ENV, PAGES, SITE_ENV, SPIDERS, Mail, SmtpSink, start_site
from netdisco.exceptions import DemoFailed
from netdisco.testing import ZooKeeperServer, free_port

T = TypeVar("T")

#: (engine id, spider) of the three demo engines
ENGINES = (("engine-1", "shop"), ("engine-2", "blog"), ("engine-3", "docs"))
SESSION_TIMEOUT = 2.0  # the engines' ZooKeeper session: how long a crash goes unnoticed
GRACE = 1.0  # the monitor waits this long before alerting about a lost engine
PROGRESS_TICKS = 6  # one progress line per second while all three crawl
DEADLINE = 30.0  # the longest the demo waits for anything it means to show


class Narrator:
    """Short timestamped lines on stdout, flushed at once (the output may be a pipe)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.started = time.monotonic()

    def say(self, who: str, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:5.1f}s] {who:<13} {text}", file=self.stream, flush=True)

    def quote(self, lines: list[str]) -> None:
        for line in lines:
            print(f"{'':22}| {line}", file=self.stream, flush=True)


@dataclass
class Child:
    """A child process in its own process group (so its pgid is its pid)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the whole group, only while the leader is unreaped (its pid is still ours)."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)


@dataclass
class Children:
    """Every process the demo started, to be stopped by pid whatever happens."""

    logs: Path
    env: dict[str, str]
    started: list[Child] = field(default_factory=list)

    def spawn(self, name: str, argv: list[str]) -> Child:
        log = self.logs / f"{name}.log"
        with log.open("wb") as handle:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # Ctrl-C reaches the demo only; it stops the rest
            )
        child = Child(name, process, log)
        self.started.append(child)
        return child

    async def wait(self, child: Child, timeout: float) -> int | None:
        """The exit code, or None if still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while child.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return child.process.poll()

    async def stop(self, child: Child, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds."""
        child.signal(signal.SIGTERM)
        code = await self.wait(child, timeout)
        if code is None:
            child.signal(signal.SIGKILL)
            code = await self.wait(child, 5.0)
        return -9 if code is None else code

    def kill_all(self) -> None:
        """Last resort, synchronous: SIGKILL every group still running and reap it."""
        for child in self.started:
            if child.alive():
                child.signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(5)


def entry_point(script: str, module: str) -> list[str]:
    """The console script beside this interpreter, else ``python -m module``."""
    path = Path(sys.executable).with_name(script)
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def child_env(site: str, items: Path) -> dict[str, str]:
    """The environment minus the user's NETDISCO_* settings, plus where the demo site is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETDISCO_")}
    env[SITE_ENV] = site
    env[ITEMS_ENV] = str(items)
    return env


def engine_toml(engine_id: str, port: int, zk_hosts: str, spider: str) -> str:
    return (
        "# generated by `netdisco demo`: one engine with one spider on the demo site\n"
        f'[engine]\nid = "{engine_id}"\nhost = "127.0.0.1"\nport = {port}\n\n'
        f'[zookeeper]\nhosts = "{zk_hosts}"\nsession_timeout = {SESSION_TIMEOUT}\n\n'
        f'[[spiders]]\nspider = "netdisco.demo_site:{SPIDERS[spider].__name__}"\n'
    )


def monitor_toml(zk_hosts: str, port: int, smtp_port: int) -> str:
    return (
        "# generated by `netdisco demo`: the monitor, alerting by e-mail to the demo's sink\n"
        f'[zookeeper]\nhosts = "{zk_hosts}"\nsession_timeout = {SESSION_TIMEOUT}\n\n'
        f'[http]\nhost = "127.0.0.1"\nport = {port}\n\n'
        f"[alerts]\ngrace = {GRACE}\nbatch_window = 0.5\n\n"
        f'[email]\nhost = "127.0.0.1"\nport = {smtp_port}\nsender = "monitor@demo.invalid"\n'
        'to = ["ops@demo.invalid"]\nevents = ["engine_lost"]\n\n'
        "[log]\njson = true\n"
    )


async def poll(check: Callable[[], Awaitable[T | None]], what: str, timeout: float) -> T:
    """Call ``check`` until it returns something; DemoFailed naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise DemoFailed(f"{what} did not happen within {timeout:.0f} s")
        await asyncio.sleep(0.1)


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    """The JSON at ``url``, or None while the server is not (yet) answering 200."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
            return await response.json() if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError):
        return None


_SHOWN = {"engine_joined", "engine_left", "engine_lost", "engine_restarted", "cluster_empty"}


class EventFeed:
    """Follows the monitor's ``/netdiscovery/events`` and narrates what it reports."""

    def __init__(self, session: aiohttp.ClientSession, url: str, narrator: Narrator) -> None:
        self.session = session
        self.url = url
        self.narrator = narrator
        self.events: list[dict[str, Any]] = []

    async def follow(self) -> None:
        while True:
            since = self.events[-1]["seq"] if self.events else 0
            body = await get_json(self.session, f"{self.url}?since={since}")
            for event in body.get("events", []) if isinstance(body, dict) else []:
                self.events.append(event)
                self._narrate(event)
            await asyncio.sleep(0.2)

    def _narrate(self, event: dict[str, Any]) -> None:
        kind = event.get("type", "?")
        if kind not in _SHOWN:
            return
        engine = event.get("engine") or {}
        where = f"pid {engine['pid']}, {engine.get('status_url')}" if "pid" in engine else ""
        self.narrator.say("monitor", f"event {kind:<15} {event.get('engine_id') or ''}  {where}")

    def find(self, kind: str, engine_id: str | None = None) -> dict[str, Any] | None:
        for event in self.events:
            if event.get("type") == kind and engine_id in (None, event.get("engine_id")):
                return event
        return None

    async def wait(self, kind: str, engine_id: str | None = None) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            return self.find(kind, engine_id)

        return await poll(check, f"the monitor's {kind} event for {engine_id}", DEADLINE)


@dataclass
class Engine:
    """One demo engine: its id, spider, HTTP port and process."""

    id: str
    spider: str
    port: int
    child: Child | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def signals_cancel(
    task: asyncio.Task[Any], narrator: Narrator, received: list[int]
) -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP cancel ``task`` once (its finally blocks stop everything)."""
    loop = asyncio.get_running_loop()
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def handler(signum: int) -> None:
        name = signal.Signals(signum).name
        if received:
            narrator.say("demo", f"{name}: still stopping, a few seconds at most")
            return
        received.append(signum)
        narrator.say("demo", f"{name}: stopping everything it started")
        task.cancel()

    for signum in handled:
        loop.add_signal_handler(signum, handler, signum)
    try:
        yield
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


class Demo:
    """The servers, the children and the story, in the order the module docstring gives."""

    def __init__(self, out: Path, narrator: Narrator) -> None:
        self.out = out
        self.say = narrator.say
        self.narrator = narrator
        self.zk = ZooKeeperServer(out / "zookeeper")
        self.sink = SmtpSink()
        self.engines = [Engine(engine_id, spider, free_port()) for engine_id, spider in ENGINES]
        self.monitor_port = free_port()
        self.children: Children | None = None
        self._zk_start: asyncio.Future[None] | None = None
        self._site: Any = None

    def prepare(self) -> None:
        """Fresh logs, items, configs and ZooKeeper data (a stale dataDir would replay)."""
        for sub in ("logs", "items", "config", "zookeeper"):
            shutil.rmtree(self.out / sub, ignore_errors=True)
            (self.out / sub).mkdir(parents=True)

    async def run(self) -> None:
        self.prepare()
        await self._start_servers()
        async with aiohttp.ClientSession() as session:
            feed = EventFeed(session, self._monitor_url("/netdiscovery/events"), self.narrator)
            follower = asyncio.create_task(feed.follow())
            try:
                await self._start_monitor(session)
                await self._start_engines(feed)
                await self._show_progress(session)
                await self._leave(feed)
                killed_at = await self._crash(feed)
                await self._show_mail(killed_at)
            finally:
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follower

    def _monitor_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.monitor_port}{path}"

    async def _start_servers(self) -> None:
        self._zk_start = asyncio.ensure_future(asyncio.to_thread(self.zk.start))
        try:
            await asyncio.shield(self._zk_start)
        except (RuntimeError, TimeoutError) as exc:
            raise DemoFailed(f"ZooKeeper did not start: {exc}") from exc
        self.say("ZooKeeper", f"serving on {self.zk.hosts} (pid {self._zk_pid()})")
        self._site, base = await start_site()
        self.say("website", f"{base}/  3 sections of {PAGES} pages, 50-240 ms per page")
        try:
            smtp_port = await self.sink.start()
        except ImportError as exc:
            raise DemoFailed("the demo needs aiosmtpd: pip install 'netdiscovery[demo]'") from exc
        self.say("SMTP sink", f"127.0.0.1:{smtp_port}  prints every e-mail it receives")
        self.children = Children(self.out / "logs", child_env(base, self.out / "items"))

    def _zk_pid(self) -> int | None:
        return None if self.zk.process is None else self.zk.process.pid

    async def _start_monitor(self, session: aiohttp.ClientSession) -> None:
        assert self.children is not None
        config = self.out / "config" / "monitor.toml"
        config.write_text(monitor_toml(self.zk.hosts, self.monitor_port, self.sink.port))
        argv = [*entry_point("netdisco-monitor", "monitor.cli"), "--config", str(config)]
        child = self.children.spawn("monitor", argv)
        self.say("monitor", f"starting (pid {child.pid}): watches /netdiscovery, grace {GRACE} s")

        async def healthy() -> bool | None:
            if not child.alive():
                raise DemoFailed(f"the monitor exited; see {child.log}")
            return await get_json(session, self._monitor_url("/netdiscovery/health")) and True

        await poll(healthy, "the monitor's first look at ZooKeeper", DEADLINE)
        self.say("monitor", f"ready, dashboard at {self._monitor_url('/')}")

    async def _start_engines(self, feed: EventFeed) -> None:
        assert self.children is not None
        argv = entry_point("netdisco", "netdisco.cli")
        for engine in self.engines:
            config = self.out / "config" / f"{engine.id}.toml"
            config.write_text(engine_toml(engine.id, engine.port, self.zk.hosts, engine.spider))
            engine.child = self.children.spawn(
                engine.id, [*argv, "--log-json", "engine", "--config", str(config)]
            )
            self.say(engine.id, f"starting (pid {engine.child.pid}): crawls /{engine.spider}/")
        for engine in self.engines:
            await feed.wait("engine_joined", engine.id)

    async def _show_progress(self, session: aiohttp.ClientSession) -> None:
        self.say("progress", "pages crawled (pages/s), read from each engine's /netdiscovery/spiders")
        last = {engine.id: (0, time.monotonic()) for engine in self.engines}
        for _ in range(PROGRESS_TICKS):
            await asyncio.sleep(1.0)
            parts = []
            for engine in self.engines:
                spiders = await get_json(session, f"{engine.url}/netdiscovery/spiders")
                done = int(spiders[0]["succeeded"]) if spiders else 0
                before, then = last[engine.id]
                now = time.monotonic()
                last[engine.id] = (done, now)
                parts.append(f"{engine.id} {done:>3} ({(done - before) / (now - then):4.1f}/s)")
            self.say("progress", " | ".join(parts))

    async def _leave(self, feed: EventFeed) -> None:
        assert self.children is not None
        engine = self.engines[0]
        assert engine.child is not None
        self.say(engine.id, "SIGTERM: a graceful stop (says 'leaving', deletes its znode, drains)")
        sent = time.monotonic()
        engine.child.signal(signal.SIGTERM)
        await feed.wait("engine_left", engine.id)
        code = await self.children.wait(engine.child, DEADLINE)
        took = time.monotonic() - sent
        self.say(engine.id, f"exited with code {code}, {took:.1f} s after SIGTERM")

    async def _crash(self, feed: EventFeed) -> float:
        assert self.children is not None
        engine = self.engines[1]
        assert engine.child is not None
        self.say(
            engine.id,
            f"SIGKILL: a crash; its znode goes when its {SESSION_TIMEOUT:.0f} s session expires",
        )
        killed_at = time.monotonic()
        engine.child.signal(signal.SIGKILL)
        await self.children.wait(engine.child, 5.0)
        await feed.wait("engine_lost", engine.id)
        took = time.monotonic() - killed_at
        self.say("monitor", f"noticed the loss {took:.1f} s after the kill; e-mail after {GRACE} s")
        return killed_at

    async def _show_mail(self, killed_at: float) -> None:
        try:
            mail: Mail = await asyncio.wait_for(self.sink.mails.get(), DEADLINE)
        except TimeoutError:
            raise DemoFailed(f"no alert e-mail within {DEADLINE:.0f} s") from None
        took = time.monotonic() - killed_at
        self.say("SMTP sink", f"received an e-mail, {took:.1f} s after the kill:")
        headers = [f"{name}: {mail.message[name]}" for name in ("From", "To", "Subject")]
        self.narrator.quote([*headers, "", *mail.body().rstrip().splitlines()])

    async def shutdown(self) -> None:
        """Stop whatever runs, engines first (they deregister), ZooKeeper last."""
        if self.children is not None:
            running = [c for c in self.children.started if c.alive()]
            if running:
                names = ", ".join(c.name for c in running)
                self.say("demo", f"stopping {names} (SIGTERM, by pid)")
            engines = [c for c in running if c.name != "monitor"]
            await asyncio.gather(*(self.children.stop(c) for c in engines))
            await asyncio.gather(*(self.children.stop(c) for c in running if c not in engines))
        if self._site is not None:
            await self._site.cleanup()
        await self.sink.stop()
        if self._zk_start is not None:
            await asyncio.wait([self._zk_start])  # a start still in progress: let it finish
            await asyncio.to_thread(self.zk.stop)

    def kill_all(self) -> None:
        """Synchronous last resort for anything the graceful path left behind."""
        if self.children is not None:
            self.children.kill_all()
        self.zk.stop(signal.SIGKILL)

    def summary(self) -> None:
        files = sorted((self.out / "items").glob("*.jsonl"))
        counts = ", ".join(f"{f.name} {_lines(f)}" for f in files)
        self.say("demo", f"items under {self.out / 'items'}: {counts or 'none'}")
        self.say("demo", f"logs under {self.out / 'logs'}, configs under {self.out / 'config'}")


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


async def run(args: argparse.Namespace) -> int:
    """``netdisco demo``: 0 when it showed everything, 1 if a step failed, 128+N on signal N."""
    narrator = Narrator()
    narrator.say("demo", "a three-engine crawl cluster and its monitor, all on 127.0.0.1")
    demo = Demo(Path(args.out), narrator)
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []
    code = 0
    with signals_cancel(task, narrator, received):
        try:
            await demo.run()
        except asyncio.CancelledError:
            code = 128 + (received[0] if received else signal.SIGINT)
        except DemoFailed as exc:
            narrator.say("demo", f"FAILED: {exc} (logs under {demo.out / 'logs'})")
            code = 1
        finally:
            try:
                await demo.shutdown()
            finally:
                demo.kill_all()
    demo.summary()
    narrator.say("demo", "done: everything it started has stopped" if code == 0 else "stopped")
    return code
