"""Prometheus metrics for one engine, read from the crawlers' stats at scrape time.

Nothing is counted per request here: the crawl bumps plain integers (and a
fixed-bucket latency histogram) in its stats, a custom collector walks the live
crawlers when ``/metrics`` is scraped, so the crawl pays next to nothing, and
every engine gets its own ``CollectorRegistry`` so two engines can share a process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from netdisco._version import __version__
from netdisco.crawl.lifecycle import SpiderState

if TYPE_CHECKING:
    from netdisco.crawl.crawler import Crawler
    from netdisco.engine.engine import SpiderEngine  # engine -> api -> metrics: types only

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# status() key -> (metric name, help); counters get "_total" from prometheus_client.
_COUNTERS = (
    ("items", "netdisco_items", "Items the spider produced."),
    ("scheduled", "netdisco_scheduled_requests", "Requests accepted into the frontier."),
    ("bytes", "netdisco_response_bytes", "Response body bytes downloaded."),
)
_GAUGES = (
    ("queue_size", "netdisco_queue_size", "Requests waiting in the frontier."),
    ("in_flight", "netdisco_in_flight_requests", "Requests being downloaded now."),
    ("seen", "netdisco_seen_urls", "Distinct URLs the spider has seen."),
    ("pages_per_second", "netdisco_pages_per_second", "Pages per second over the last minute."),
    (
        "idle_share",
        "netdisco_slot_idle_share",
        "Share of polite slot-time left free while requests waited and no delay ran.",
    ),
)


class EngineCollector(Collector):
    """Builds every metric family from one snapshot of the engine's crawlers."""

    def __init__(self, engine: SpiderEngine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        crawlers = list(self._engine.crawlers())
        spiders = [(c.name, self._engine.spider_status(c.name), dict(c.stats.outcomes))
                   for c in crawlers]  # fmt: skip
        jobs = self._engine.jobs.status() if self._engine.jobs is not None else []
        spiders += [(job["name"], job, {}) for job in jobs]  # a job's counters, from its child
        yield from self._engine_families()
        yield from _downloads(crawlers)
        yield from _schedules(spiders)
        requests = CounterMetricFamily(
            "netdisco_requests", "Finished requests by outcome.", labels=("spider", "outcome")
        )
        state = GaugeMetricFamily(
            "netdisco_spider_state", "1 for the spider's current state.", labels=("spider", "state")
        )
        for name, status, outcomes in spiders:
            for outcome, count in sorted(outcomes.items()):
                requests.add_metric((name, outcome), count)
            for candidate in SpiderState:  # one series per state, the current one at 1
                current = 1.0 if status["state"] == candidate else 0.0
                state.add_metric((name, candidate.value), current)
        yield requests
        yield state
        yield from _per_spider(spiders, _COUNTERS, CounterMetricFamily)
        yield from _per_spider(spiders, _GAUGES, GaugeMetricFamily)

    def _engine_families(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "netdisco_engine_info", "Engine identity (always 1).", labels=("engine", "version")
        )
        info.add_metric((self._engine.id, __version__), 1.0)
        yield info
        if self._engine.started_at is not None:
            yield GaugeMetricFamily(
                "netdisco_engine_start_time_seconds",
                "When the engine started, seconds since the epoch.",
                value=self._engine.started_at,
            )
        if self._engine.jobs is not None:
            yield GaugeMetricFamily(
                "netdisco_jobs_running", "Jobs running as child processes now.",
                value=float(len(self._engine.jobs.running)),
            )  # fmt: skip
        healthy = self._engine.registry_healthy
        if healthy is not None:
            yield GaugeMetricFamily(
                "netdisco_engine_registered",
                "1 while the engine's ZooKeeper registration is healthy.",
                value=1.0 if healthy else 0.0,
            )


def _downloads(crawlers: list[Crawler]) -> Iterator[Metric]:
    """The latency histogram and the responses by status code, per spider."""
    latency = HistogramMetricFamily(
        "netdisco_download_duration_seconds",
        "Time from sending a request to having its body (every redirect hop and retry).",
        labels=("spider",),
    )
    codes = CounterMetricFamily(
        "netdisco_responses", "HTTP responses by status code.", labels=("spider", "code")
    )
    for crawler in crawlers:
        histogram = crawler.stats.latency
        latency.add_metric((crawler.name,), histogram.cumulative(), histogram.total)
        for code, count in sorted(crawler.stats.statuses.items()):
            codes.add_metric((crawler.name, str(code)), count)
    yield latency
    yield codes
    yield _failures(crawlers)
    yield from _errors(crawlers)


def _errors(crawlers: list[Crawler]) -> Iterator[Metric]:
    """Exceptions raised by the spider's code: callbacks (and ``start``), item pipelines."""
    families = {
        "callback": CounterMetricFamily(
            "netdisco_callback_errors",
            "Exceptions raised by the spider's callbacks or its start(), by type.",
            labels=("spider", "type"),
        ),
        "pipeline": CounterMetricFamily(
            "netdisco_pipeline_errors",
            "Exceptions raised by item pipelines (DropItem not counted), by type.",
            labels=("spider", "type"),
        ),
    }
    for crawler in crawlers:
        for where, counts in crawler.stats.errors_by_type().items():
            for kind, count in sorted(counts.items()):
                families[where].add_metric((crawler.name, kind), count)
    yield from families.values()


def _failures(crawlers: list[Crawler]) -> Metric:
    """Requests that ended failed, by reason (``netdisco.crawl.failures``)."""
    failed = CounterMetricFamily(
        "netdisco_failed_requests",
        "Requests that ended failed, by reason (http_<status> or an error kind).",
        labels=("spider", "reason"),
    )
    for crawler in crawlers:
        for reason, count in sorted(crawler.failures.by_reason.items()):
            failed.add_metric((crawler.name, reason), count)
    return failed


def _schedules(spiders: list[tuple[str, dict[str, Any], dict[str, int]]]) -> Iterator[Metric]:
    """When each scheduled spider runs next (unscheduled spiders have no sample)."""
    next_run = GaugeMetricFamily(
        "netdisco_schedule_next_run_timestamp_seconds",
        "When the spider's next scheduled run starts, seconds since the epoch.",
        labels=("spider",),
    )
    for name, status, _ in spiders:
        if isinstance(status.get("next_run"), int | float):
            next_run.add_metric((name,), float(status["next_run"]))
    yield next_run


def _per_spider(
    spiders: list[tuple[str, dict[str, Any], dict[str, int]]],
    table: tuple[tuple[str, str, str], ...],
    family: Callable[..., CounterMetricFamily | GaugeMetricFamily],
) -> Iterator[Metric]:
    for key, metric, doc in table:
        values = family(metric, doc, labels=("spider",))
        for name, status, _ in spiders:
            values.add_metric((name,), float(status.get(key) or 0))
        yield values


class EngineMetrics:
    """One engine's private registry; ``render()`` is the ``/metrics`` body."""

    def __init__(self, engine: SpiderEngine) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(EngineCollector(engine))

    def render(self) -> bytes:
        """The Prometheus text exposition of the engine right now."""
        return generate_latest(self.registry)
