"""Prometheus metrics of one monitor, in its own registry.

No global registry: two monitors (or a monitor and an engine) can live in one
process, as they do in the tests, without clashing metric names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from netdisco.cluster.contract import EventType, NodeState

#: engine states as labelled; whatever else a node says counts as "other"
ENGINE_STATES = (*(s.value for s in NodeState), "unknown", "other")


class EngineStates(Collector):
    """``netdisco_monitor_engines{state}``, counted from the view at scrape time."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.states: Callable[[], list[str]] = list
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "netdisco_monitor_engines", "Engines in the monitor's view, by state.", labels=["state"]
        )
        counts = dict.fromkeys(ENGINE_STATES, 0)
        for state in self.states():
            counts[state if state in counts else "other"] += 1
        for state, count in counts.items():
            family.add_metric([state], count)
        yield family


def _dropped(registry: CollectorRegistry) -> Counter:
    counter = Counter(
        "netdisco_monitor_dropped",
        "Node data or engine answers not read: past their size cap, by what.",
        ["what"],
        registry=registry,
    )
    for what in ("znode", "status"):  # both from 0
        counter.labels(what)
    return counter


def _fates(registry: CollectorRegistry) -> tuple[Counter, Counter, Counter, Gauge]:
    """Alerts given up; and what several monitors add (monitor.outbox): alerts taken over
    from a monitor that died with them, duplicates found, whether this monitor delivers."""
    dropped = Counter(
        "netdisco_monitor_alerts_dropped",
        "Alerts given up after max_age or at shutdown, by hook.",
        ["hook"],
        registry=registry,
    )
    taken_over = Counter(
        "netdisco_monitor_alerts_taken_over",
        "Alerts another monitor had claimed and died with, delivered here: each may be "
        "a duplicate (its first monitor may have sent it before it died).",
        ["hook"],
        registry=registry,
    )
    duplicate = Counter(
        "netdisco_monitor_alerts_duplicate",
        "Alerts this monitor sent and then found sent by another (a duplicate).",
        ["hook"],
        registry=registry,
    )
    delivering = Gauge(
        "netdisco_monitor_delivering",
        "1 while this monitor delivers the alerts.",
        registry=registry,
    )
    return dropped, taken_over, duplicate, delivering


class Metrics:
    """The monitor's counters and gauges; ``render()`` gives the text format."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.engine_states = EngineStates(r)
        self.engines_online = Gauge(
            "netdisco_monitor_engines_online", "Engines in the monitor's view.", registry=r
        )
        self.events = Counter(
            "netdisco_monitor_events", "Events reported, by type.", ["type"], registry=r
        )
        for event_type in EventType:  # every type from 0, so rates work from the first one
            self.events.labels(event_type.value)
        self.alerts_sent = Counter(
            "netdisco_monitor_alerts_sent", "Alerts delivered, by hook.", ["hook"], registry=r
        )
        self.alerts_failed = Counter(
            "netdisco_monitor_alerts_failed",
            "Alert delivery attempts that failed (each is retried until max_age).",
            ["hook"],
            registry=r,
        )
        self.alerts_dropped, self.alerts_taken_over, self.alerts_duplicate, self.delivering = (
            _fates(r)
        )
        self.unobserved = Counter(
            "netdisco_monitor_unobserved_changes",
            "Child creates/deletes too fast to observe (from the root's cversion).",
            registry=r,
        )
        self.dropped = _dropped(r)
        self.zk_connected = Gauge(
            "netdisco_monitor_zk_connected", "1 while connected to ZooKeeper.", registry=r
        )
        self.view_fresh = Gauge(
            "netdisco_monitor_view_fresh",
            "1 while the view reflects a current listing.",
            registry=r,
        )

    def bind(
        self,
        online: Callable[[], float],
        connected: Callable[[], float],
        fresh: Callable[[], float],
        states: Callable[[], list[str]] = list,
    ) -> None:
        """Read the gauges from live state at scrape time, so they are never out of date."""
        self.engines_online.set_function(online)
        self.engine_states.states = states
        self.zk_connected.set_function(connected)
        self.view_fresh.set_function(fresh)

    def render(self) -> bytes:
        return generate_latest(self.registry)
