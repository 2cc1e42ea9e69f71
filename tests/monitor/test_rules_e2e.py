"""The spider rules end to end: a real engine in ZooKeeper, a real monitor, an SMTP sink.

Each rule fires exactly once however many polls see the same condition.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from netdisco import Pipeline, Request, Response
from netdisco.crawl.settings import Settings
from netdisco.engine import SpiderEngine
from netdisco.engine.config import EngineSettings
from netdisco.testing import eventually
from tests.monitor.conftest import Smtp, monitor_config
from tests.netdisco.engine_site import SiteSpider

RULES = ["spider_failed", "spider_finished_empty", "spider_stalled", "disk_free_below"]


class Empty(SiteSpider):
    """Crawls pages and keeps no item."""

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield from ()


@dataclass
class Priced:
    url: str
    price: float


class Unpriced(SiteSpider):
    """Its selector for the price broke: every item is off its schema."""

    item_schema = Priced

    def parse(self, response: Response) -> Iterator[dict[str, Any] | Request]:
        yield {"url": response.url}


class Unopenable(Pipeline):
    """Its database is gone: the spider fails at its start."""

    async def open(self) -> None:
        raise RuntimeError("the database is gone")


async def test_each_spider_rule_fires_once_by_mail(
    zk_hosts: str, start_monitor: Any, site: str, smtp: Smtp, tmp_path: Path
) -> None:
    email = {"sender": "netdisco@example.org", "to": ["ops@example.org"], "port": smtp.port,
             "events": RULES}  # fmt: skip
    rules = {"stall_after": 1.0, "grace": 0.0, "disk_free_below": 1 << 60,  # every disk is low
             "tick": 0.2}  # fmt: skip
    config = monitor_config(zk_hosts, email=email, http={"poll_status": 0.2}, rules=rules)
    monitor, rec = await start_monitor(config)
    engine = SpiderEngine(EngineSettings(id="rules-1", port=0, feeds_dir=str(tmp_path)),
                          zookeeper={"hosts": zk_hosts, "session_timeout": 4.0})  # fmt: skip
    quick = Settings(progress_interval=0, max_pages=3)
    engine.add_spider(Empty(name="empty", start_urls=[f"{site}/fast/p/0"]), quick)
    broken = SiteSpider(name="broken", start_urls=[f"{site}/fast/p/0"])
    engine.add_spider(broken, quick, pipelines=[Unopenable()])
    engine.add_spider(Unpriced(name="unpriced", start_urls=[f"{site}/fast/p/0"]), quick)
    stuck = Settings(progress_interval=0, concurrency=1, timeout=60.0)
    engine.add_spider(SiteSpider(name="stuck", start_urls=[f"{site}/hang", f"{site}/fast/p/1"]),
                      stuck)  # fmt: skip
    polls: list[str] = []  # the status reads the rules ran on (by engine), and "tick"s
    spiders, tick = monitor.rules.spiders, monitor.rules.tick

    def read(engine_id: str, body: Any, now: float) -> Any:
        polls.append(engine_id)
        return spiders(engine_id, body, now)

    def ticked(now: float, answers_within: float) -> Any:
        polls.append("tick")
        return tick(now, answers_within)

    monitor.rules.spiders, monitor.rules.tick = read, ticked
    await engine.start()
    try:
        await eventually(lambda: all(rec.of(kind, "rules-1")
                                     for kind in [*RULES, "spider_items_invalid"]),
                         "every rule fired", timeout=30)  # fmt: skip
        # five more polls and ticks over the same conditions (counted, not a wait): none
        # fires again
        more = {name: polls.count(name) + 5 for name in ("rules-1", "tick")}
        await eventually(
            lambda: all(polls.count(k) >= n for k, n in more.items()), "5 more", timeout=20
        )
        fired = [(e.type.value, e.detail["spider"]) for e in rec.events if e.type.value in RULES]
        assert sorted(fired) == [
            ("disk_free_below", None),
            ("spider_failed", "broken"),
            ("spider_finished_empty", "empty"),
            ("spider_stalled", "stuck"),
        ]
        assert rec.of("disk_free_below")[0].detail["disk"] == "feeds"
        await eventually(lambda: len(smtp.mailbox.messages) >= 4, "four mails", timeout=10)
        # and nothing more to come: no delivery still going or waiting to retry
        await eventually(
            lambda: not monitor.alerts.view()["sending"], "deliveries done", timeout=20
        )
        subjects = sorted(str(m["Subject"]) for m in smtp.mailbox.messages)
        assert len(subjects) == 4, subjects
        mails = smtp.mailbox.messages  # quoted-printable once a line is long: decoded
        bodies = "".join(cast(bytes, m.get_payload(decode=True)).decode() for m in mails)
        assert "the database is gone" in bodies
        assert f"{monitor.http.url}/#engine=rules-1&spider=stuck" in bodies
        (invalid,) = rec.of("spider_items_invalid", "rules-1")  # once, though 3 items were
        assert (invalid.detail["spider"], invalid.detail["threshold"]) == ("unpriced", 1)
        assert invalid.detail["items_invalid"] >= 1
        stalled = rec.of("spider_stalled", "rules-1")[0].detail
        assert stalled["queue"] >= 1
        assert stalled["quiet_for"] >= 1.0
    finally:
        await engine.stop(deadline=1)


async def test_two_monitors_mail_each_rule_once(
    zk_hosts: str, start_monitor: Any, site: str, smtp: Smtp, tmp_path: Path
) -> None:
    """Both monitors see every rule trip; the outbox keeps one alert of each (a run that
    ended by its run, a lasting condition by its episode), sent by the leader."""
    email = {"sender": "netdisco@example.org", "to": ["ops@example.org"], "port": smtp.port,
             "events": RULES}  # fmt: skip
    rules = {"stall_after": 1.0, "grace": 0.0, "disk_free_below": 1 << 60, "tick": 0.2}
    config = monitor_config(zk_hosts, email=email, http={"poll_status": 0.2}, rules=rules)
    pair = [await start_monitor(config) for _ in range(2)]
    engine = SpiderEngine(EngineSettings(id="rules-2", port=0, feeds_dir=str(tmp_path)),
                          zookeeper={"hosts": zk_hosts, "session_timeout": 4.0})  # fmt: skip
    quick = Settings(progress_interval=0, max_pages=3)
    engine.add_spider(Empty(name="empty", start_urls=[f"{site}/fast/p/0"]), quick)
    broken = SiteSpider(name="broken", start_urls=[f"{site}/fast/p/0"])
    engine.add_spider(broken, quick, pipelines=[Unopenable()])
    stuck = Settings(progress_interval=0, concurrency=1, timeout=60.0)
    engine.add_spider(SiteSpider(name="stuck", start_urls=[f"{site}/hang", f"{site}/fast/p/1"]),
                      stuck)  # fmt: skip
    await engine.start()
    try:
        saw = lambda: all(r.of(kind, "rules-2") for _, r in pair for kind in RULES)  # noqa: E731
        await eventually(saw, "both saw every rule", timeout=30)

        def sent() -> bool:
            return sum(len(d["events"]) for m, _ in pair for d in m.alerts.deliveries) >= 4

        await eventually(sent, "four alerts sent", timeout=20)
        await eventually(lambda: all(not m.alerts.view()["sending"] for m, _ in pair), "done")
        subjects = sorted(str(m["Subject"]).split(" ", 1)[1] for m in smtp.mailbox.messages)
        assert subjects == [f"{kind}: rules-2" for kind in sorted(RULES)]
        assert [bool(m.alerts.deliveries) for m, _ in pair].count(True) == 1
    finally:
        await engine.stop(deadline=1)
