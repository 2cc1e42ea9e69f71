"""The monitor daemon: watcher, alerts and HTTP wired together, with an arq-like lifecycle.

``Monitor(config).run()`` blocks until SIGTERM or SIGINT, then stops cleanly and
logs one summary line; ``start()`` / ``close()`` let tests and embedders drive it
inside their own loop. Every event is logged here (the always-on log hook),
kept for the HTTP routes, counted, then handed to the alert router.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import structlog

from monitor import __version__
from monitor.alerts import CLUSTER, Alerts
from monitor.control import Control
from monitor.departed import Departed
from monitor.events import Event, EventType, iso, same
from monitor.failed import Failed
from monitor.history import History
from monitor.hooks import build_hooks
from monitor.http import HttpServer
from monitor.jobs import Jobs
from monitor.leader import Latch
from monitor.metrics import Metrics
from monitor.outbox import Courier, Outbox
from monitor.projects import Projects
from monitor.rules import ENDED, MAX_SPIDERS, Rules, Trip, name, spider_changes
from monitor.schedules import Schedules
from monitor.settings import MonitorConfig
from monitor.status import StatusPoller
from monitor.watcher import Watcher
from netdisco.cluster.acl import cluster_acl
from netdisco.cluster.membership import Member
from netdisco.cluster.proof import proof_key

log = structlog.get_logger(__name__)

_WARN = frozenset({EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY, EventType.ZK_DISCONNECTED})
_GONE = frozenset({EventType.ENGINE_LEFT, EventType.ENGINE_LOST})
_READ = frozenset({EventType.ENGINE_JOINED, EventType.ENGINE_UPDATED, EventType.ENGINE_RESTARTED})


class Monitor:
    """One monitor: a ZooKeeper view, hooks, and an HTTP endpoint."""

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.recent: deque[Event] = deque(maxlen=config.http.recent_events)
        self.counts: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()  # what was too big to read: "znode", "status"
        self.listeners: list[Callable[[Event], None]] = []  # e.g. tests, benchmarks
        self.watcher = self._watch(config)
        self.latch, self.outbox = self._latch(config)
        self.alerts = self._alerts(config)
        retention = config.zookeeper.tombstone_max_age
        self.courier = Courier(self.outbox, self.latch, self.alerts.hand, retention)
        self.control = Control(config.control, self.watcher.members, self.watcher.proven)
        self.projects = Projects(self.watcher.client, config.zookeeper, config.control, self.record)
        self.jobs = Jobs(config.jobs, self.watcher, self.record)
        self.listeners.append(self.jobs.wake)  # an engine came or went: place, or lose, now
        self.schedules = Schedules(self.jobs, self.record)
        self.failed = Failed()
        self.http = HttpServer(self, self.control, config.http.host, config.http.port)
        self.history = History(hours=config.http.history_hours)
        self.rules = Rules(config.rules)
        self.departed = Departed(config.http.offline_retention)
        self.status = StatusPoller(
            self.watcher.members,
            config.http.poll_status,
            on_body=self._status_read,
            on_dropped=self.dropped,
        )
        self._bind_metrics()
        self.started_at = time.time()
        self._clock: asyncio.Task[None] | None = None
        #: how far apart two monitors' trips of one lasting condition may be: a status
        #: poll each sees at its own time, a clock tick each (monitor.outbox folds them)
        self._episode = max(5.0, 2 * (config.http.poll_status + config.rules.tick))

    def _watch(self, config: MonitorConfig) -> Watcher:
        """The view of ZooKeeper; with the engine token, leaves and engines are proven."""
        token = config.control.engine_token if config.control else None
        return Watcher(
            config.zookeeper,
            self.record,
            state_file=config.alerts.state_file,
            on_unobserved=self.metrics.unobserved.inc,
            on_dropped=self.dropped,
            proof_key=proof_key(token),
        )

    def _alerts(self, config: MonitorConfig) -> Alerts:
        return Alerts(
            build_hooks(config),
            config.alerts,
            self.metrics,
            fresh=self.watcher.fresh,
            present=self._present,
            record=self.record,
            outbox=self.outbox,
        )

    def _latch(self, config: MonitorConfig) -> tuple[Latch, Outbox]:
        """Which monitor delivers (monitor.leader) and the alerts' record (monitor.outbox)."""
        client, root = self.watcher.client, config.zookeeper.root
        acl = cluster_acl(config.zookeeper.credentials())
        about = lambda: {"url": self.http.url, "version": __version__}  # noqa: E731
        latch = Latch(client, root, acl, about, on_change=self._leader_changed)
        return latch, Outbox(client, root, acl, latch, self.metrics)

    def _leader_changed(self) -> None:
        self.metrics.delivering.set(float(self.latch.leading))
        self.courier.changed()

    def _bind_metrics(self) -> None:
        """The gauges read from the view when scraped."""
        self.metrics.bind(
            online=lambda: len(self.watcher.members()),
            states=lambda: [m.state for m in self.watcher.members()],
            connected=lambda: float(self.watcher.connected),
            fresh=lambda: float(self.watcher.fresh.is_set()),
        )

    def _present(self, key: str) -> bool:
        """Is the engine (or, for ``CLUSTER``, any engine) in the view?"""
        members = self.watcher.view.members if self.watcher.view else {}
        return bool(members) if key == CLUSTER else key in members

    def _status_read(self, engine_id: str, body: Any) -> None:
        """Keep a poll's answer for the dashboard (forgetting engines that left, so it stays
        bounded), and run the rules over it and over the engine's znode data."""
        now = time.time()
        self.history.record(engine_id, body, now)
        members = self.watcher.members()
        if len(self.history) > len(members):
            self.history.keep_only(m.name for m in members)
            self.rules.keep_only(m.name for m in members)
        member = next((m for m in members if m.name == engine_id), None)
        if member is not None:
            self._tripped(self.rules.engine(engine_id, member.data, now))
            self._tripped(self.rules.spiders(engine_id, body, now))

    def _derive(self, event: Event) -> None:
        """What follows from a membership event: departures kept, spider changes, rules."""
        engine_id = event.engine_id
        if engine_id is None:
            return
        if event.type in _GONE:
            self.rules.forget(engine_id)
            read = self.history.engine(engine_id)
            self.departed.add(event, read, self.history.read_at(engine_id))
        if event.type not in _READ:
            return
        self.departed.back(engine_id)
        if event.type is EventType.ENGINE_RESTARTED:
            self.rules.forget(engine_id)
        if event.type is EventType.ENGINE_UPDATED:
            for kind, spider, old, new in spider_changes(event.previous, event.engine):
                detail = {"spider": spider, "from": old, "to": new}
                write = event.identity[1:] if event.identity else None  # engine, czxid, mzxid
                identity = None if write is None else same(kind.value, *write, spider)
                self.record(Event(type=kind, engine_id=engine_id, engine=event.engine,
                                  detail=detail, time=event.time, identity=identity))  # fmt: skip
        self._tripped(self.rules.engine(engine_id, event.engine, event.time))

    async def _rule_clock(self) -> None:
        """Lasting conditions are reported while they last, not only when something is
        read: a stuck loop writes its znode once and answers no poll after it."""
        answers_within = 2 * self.config.http.poll_status + self.status.timeout
        while True:
            await asyncio.sleep(self.config.rules.tick)
            self._tripped(self.rules.tick(time.time(), answers_within))

    def _tripped(self, trips: list[Trip]) -> None:
        """Each rule that tripped, as an event with its figures and a dashboard link."""
        members = {m.name: m for m in self.watcher.members()}
        base = (self.config.rules.dashboard_url or self.http.url).rstrip("/")
        for trip in trips:
            member = members.get(trip.engine_id)
            link = f"{base}/#engine={quote(trip.engine_id, safe='')}"
            if trip.spider is not None:
                link += f"&spider={quote(trip.spider, safe='')}"
            detail = {"spider": trip.spider, **trip.figures, "dashboard": link}
            engine = member.describe() if member is not None else {"id": trip.engine_id}
            czxid = member.czxid if member is not None else None
            identity = same(trip.type.value, trip.engine_id, czxid, trip.spider,
                            episode(trip, self._episode))  # fmt: skip
            self.record(Event(type=trip.type, engine_id=trip.engine_id, engine=engine,
                              detail=detail, identity=identity))  # fmt: skip

    def _alert_of(self, engine_id: str, gone: dict[str, Any]) -> dict[str, Any]:
        """What became of the alert about an engine that went: sent, dropped, waiting, none."""
        kind = "engine_left" if gone["how"] == "left" else "engine_lost"
        tried = [d for d in self.alerts.deliveries
                 if gone["seq"] in d["seqs"] or gone.get("key") in d.get("keys", ())]  # fmt: skip
        if tried:
            return {"state": tried[-1]["result"], "hooks": [d["hook"] for d in tried],
                    "error": tried[-1]["error"]}  # fmt: skip
        hooks = [h.name for h in self.alerts.hooks if EventType(kind) in h.events]
        if not hooks:  # no hook takes it: nothing waits, whatever the grace
            return {"state": "none", "hooks": [], "error": None}
        state = "waiting" if self.alerts.waiting(engine_id) else "pending"
        if state == "pending" and not self.latch.leading:
            state = "elsewhere"  # recorded in the outbox: the delivering monitor sends it
        return {"state": state, "hooks": hooks, "error": None}

    def dropped(self, what: str) -> None:
        """Count one thing not read because it passed its size cap (``what``: znode, status)."""
        self.drops[what] += 1
        self.metrics.dropped.labels(what).inc()

    def record(self, event: Event) -> None:
        """Log, keep, count, then route one event. Called on the loop, never blocks."""
        engine = event.engine
        fields: dict[str, Any] = {"engine_id": event.engine_id} if event.engine_id else {}
        if engine:
            fields.update(host=engine.get("host"), status_url=engine.get("status_url"))
        (log.warning if event.type in _WARN else log.info)(
            event.type.value, **fields, **event.detail
        )
        self.recent.append(event)
        self.counts[event.type.value] += 1
        self.metrics.events.labels(event.type.value).inc()
        for listener in self.listeners:
            listener(event)
        self.alerts.submit(event)
        self._derive(event)

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.alerts.leave_window is not None:
            log.warning("leave_window_deprecated", detail="alerts.leave_window is ignored: "
                        "a graceful leave is told by its tombstone")  # fmt: skip
        await self.http.start()
        await self.watcher.start()
        self.latch.start()
        self.courier.start()
        self.jobs.start()
        self.schedules.start()
        self.status.start()
        self._clock = asyncio.create_task(self._rule_clock(), name="rule-clock")
        log.info("monitor_started", version=__version__, zk=self.config.zookeeper.hosts,
                 root=self.config.zookeeper.root, http=self.http.url)  # fmt: skip

    async def close(self) -> None:
        """Stop watching, flush alerts, stop serving; then one summary line."""
        if self._clock is not None:
            self._clock.cancel()
            await asyncio.gather(self._clock, return_exceptions=True)
        await self.status.close()
        await self.control.close()
        await self.schedules.close()
        await self.jobs.close()
        await self.failed.close()
        await self.courier.close()
        await self.alerts.close()  # what it claimed and could not send goes back to pending
        await self.latch.close()  # then the next monitor delivers at once
        await self.watcher.close()
        await self.http.close()
        log.info("monitor_stopped", **self.summary())

    def summary(self) -> dict[str, Any]:
        def total(metric: Any) -> int:
            return int(sum(s.value for m in metric.collect() for s in m.samples
                           if s.name.endswith("_total")))  # fmt: skip

        return {
            "uptime": round(time.time() - self.started_at, 1),
            "engines_online": len(self.watcher.members()),
            "events": dict(self.counts),
            "unobserved_changes": self.watcher.unobserved_total,
            "alerts_sent": total(self.metrics.alerts_sent),
            "alerts_failed": total(self.metrics.alerts_failed),
            "alerts_dropped": total(self.metrics.alerts_dropped),
        }

    async def async_run(self) -> None:
        """Run until SIGTERM or SIGINT."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self.start()
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.close()

    def run(self) -> None:
        asyncio.run(self.async_run())

    # -- what the HTTP routes read ----------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        engines = []
        for member in self.watcher.members():
            item = member.describe()
            item["since_iso"] = iso(member.since) if member.since else None
            rate = self.status.rates.get(member.name)
            read = rate is not None and rate.pages_per_second is not None
            item["pages_per_second"] = self.history.engine_rate(member.name) if read else None
            item["status_error"] = rate.error if rate is not None else None
            engines.append(item)
        return {
            "root": self.config.zookeeper.root,
            "version": __version__,
            "started_at": self.started_at,
            "zookeeper": {
                "connected": self.watcher.connected,
                "fresh": self.watcher.fresh.is_set(),
            },
            "unobserved_changes": self.watcher.unobserved_total,
            "dropped": {"znode": self.drops["znode"], "status": self.drops["status"]},
            "engines": engines,
            "offline": self.departed.entries(time.time(), self._alert_of),
            "alerts": list(self.alerts.deliveries)[-50:],
            "monitors": self.latch.view(),
        }

    def recent_events(self, since: int, limit: int) -> list[dict[str, Any]]:
        newer = [e.to_json() for e in self.recent if e.seq > since]
        return newer[-limit:] if limit else []

    def spider_history(self, span: float) -> dict[str, Any]:
        """The spiders' summaries, their rates over the last ``span`` seconds, the totals."""
        members = self.watcher.members()
        self.history.keep_only(m.name for m in members)
        now = time.time()
        gone = self.departed.summaries(now)
        return {
            **self.history.to_json(crawls(members), gone, span, now),
            "interval": self.config.http.poll_status,
            "hours": self.config.http.history_hours,
            "control": self.config.control is not None,
        }

    def health(self) -> tuple[bool, dict[str, Any]]:
        connected, fresh = self.watcher.connected, self.watcher.fresh.is_set()
        ok = connected and fresh
        reason = None if ok else ("not connected to ZooKeeper" if not connected else "view stale")
        body = {
            "status": "ok" if ok else "degraded",
            "reason": reason,
            "connected": connected,
            "fresh": fresh,
            "engines": len(self.watcher.members()),
            "monitors": len(self.latch.monitors),
            "delivering": self.latch.leading,
            "warnings": list(self.watcher.warnings),
        }
        return ok, body

    def metrics_text(self) -> bytes:
        return self.metrics.render()


def episode(trip: Trip, width: float) -> str:
    """Which episode of its rule a trip is, alike in every monitor: a run that ended is
    its run (``started_at``); a lasting condition, the ``width`` s bucket it tripped in,
    ``~N`` (the outbox folds it with the bucket before: :func:`monitor.outbox.neighbour`)."""
    run = trip.figures.get("started_at")
    if trip.type in ENDED:
        return f"run {run!r}"
    return f"~{int(time.time() // width)}"


def crawls(members: list[Member]) -> dict[tuple[str, str], str]:
    """``(engine, spider) -> crawl``: which spiders share a frontier (their znode's ``crawl``)."""
    out = {}
    for member in members:
        spiders = member.data.get("spiders")
        for entry in spiders[:MAX_SPIDERS] if isinstance(spiders, list) else []:
            spider = name(entry.get("name")) if isinstance(entry, dict) else None
            crawl = name(entry.get("crawl")) if isinstance(entry, dict) else None
            if spider is not None and crawl is not None:
                out[(member.name, spider)] = crawl
    return out
