"""``make partitions`` fails on what it promises to catch (tests/cluster/partitions.py):
each failure condition on its own, judged from a site's log and a monitor's events as
the harness reads them, and what a run leaves behind. The real runs that break the fence
or invent an event (``NDC_BREAK``) need root and minutes; these need neither."""

from __future__ import annotations

import os
import random
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest

from netdisco.frontiers.redis.owned import OWNER_TTL_MS
from tests.cluster import partitions
from tests.cluster.cluster import (
    ENGINES,
    MACHINES,
    REDIS_PORT,
    SESSION_TIMEOUT,
    SITE_PORT,
    Cluster,
)
from tests.cluster.machines import leftovers
from tests.cluster.partitions import END_LIMIT, Cut, Partitions, Result
from tests.cluster.site import page_url


class Recorded:
    """The monitor's events the harness reads from a cluster, given instead of asked for."""

    def __init__(self, events: list[dict[str, Any]]):
        self._events = events

    def events(self) -> list[dict[str, Any]]:
        return self._events


def judged(name: str, cuts: list[Cut], fetches: list[Any], events: list[Any]) -> Result:
    harness = Partitions(Recorded(events), random.Random(0))  # type: ignore[arg-type]
    harness.fetches = lambda: fetches  # type: ignore[method-assign]
    result = Result(name, cuts=cuts, ended=12.0)
    harness.judge(result, began=0.0)
    return result


ENGINE = "engine-1"
ADDRESS = MACHINES[ENGINES[ENGINE]]
PORT = SITE_PORT  # the site's host that served a fetch


OLD, NEW = {"session": "0x1000"}, {"session": "0x2000"}


def test_a_clean_scenario_passes() -> None:
    cut = Cut(100.0, 110.0, ENGINE, recovered=0.5)  # long enough to expire the session
    fetches = [(101.0, ADDRESS, "/p/1", PORT), (111.0, ADDRESS, "/p/2", PORT)]  # before, after
    lost = {"type": "engine_lost", "engine_id": ENGINE, "time": 104.5, "engine": OLD}
    back = {"type": "engine_joined", "engine_id": ENGINE, "time": 110.5, "engine": NEW}
    result = judged("engine-zk", [cut], fetches, [lost, back])
    assert result.failures() == []
    assert result.expired == 1


def test_a_start_by_a_cut_engine_once_its_leases_could_be_recovered_fails() -> None:
    cut = Cut(100.0, 110.0, ENGINE, recovered=0.5)
    late = 100.0 + SESSION_TIMEOUT + 0.5
    result = judged("engine-zk", [cut], [(late, ADDRESS, "/p/3", PORT)], [])
    assert result.late == 1
    assert result.failures() == ["1 late starts by a fenced engine"]


def test_an_engine_cut_from_redis_past_its_bucket_leases_must_start_nothing() -> None:
    """Owned hosts: an engine cut from Redis may start requests of its hosts only until
    its bucket leases' TTL has passed (shorter than ``lease_ttl``), the others may own
    its hosts after that."""
    assert partitions.REDIS_LIMIT == OWNER_TTL_MS / 1000 < partitions.LEASE_TTL
    cut = Cut(100.0, 110.0, ENGINE, recovered=0.5)
    fetches = [
        (100.0 + OWNER_TTL_MS / 1000 - 0.5, ADDRESS, "/p/1", PORT),  # still its own
        (100.0 + OWNER_TTL_MS / 1000 + 0.5, ADDRESS, "/p/2", PORT),  # its hosts may move
    ]
    result = judged("engine-redis", [cut], fetches, [])
    assert (result.expired, result.late) == (1, 1)
    assert result.failures() == ["1 late starts by a fenced engine"]


@pytest.mark.parametrize("kind", ["engine_lost", "engine_left"])
def test_an_event_nothing_explains_fails(kind: str) -> None:
    cut = Cut(100.0, 102.0, ENGINE, recovered=0.5)  # too short to expire anything
    event = {"type": kind, "engine_id": "engine-2", "time": 101.0}
    result = judged("engine-redis", [cut], [], [event])
    assert result.failures() == [f"false events: {kind} engine-2"]


def test_a_loss_zookeeper_made_is_true_and_a_loss_it_did_not_is_false() -> None:
    """A ZooKeeper server cut under an engine's session may end it (the leader's, in an
    election): the engine comes back on a new session, and its loss was real. A loss
    reported while the engine stays on its session is invented."""
    old, new = {"session": "0x1000"}, {"session": "0x2000"}
    lost = {"type": "engine_lost", "engine_id": ENGINE, "time": 101.0, "engine": old}
    back = {"type": "engine_joined", "engine_id": ENGINE, "time": 101.5, "engine": new}
    cut = Cut(100.0, 105.0, "zk1 (leader, 10 pages meanwhile)", recovered=0.5)
    real = judged("zk-leader", [cut], [], [back, lost])  # in any order from the monitor
    assert real.failures() == []
    assert real.expiries == 1
    same = {"type": "engine_joined", "engine_id": ENGINE, "time": 101.5, "engine": old}
    invented = judged("zk-leader", [cut], [], [lost, same])
    assert invented.failures() == [f"false events: engine_lost {ENGINE}"]


def test_a_loss_the_engine_came_back_from_on_its_own_session_is_false() -> None:
    """The cut engine reported lost, then seen again on the same session: ZooKeeper
    never ended it, so the monitor invented the loss (however long the cut)."""
    cut = Cut(100.0, 100.0 + SESSION_TIMEOUT * 2, ENGINE, recovered=0.5)
    lost = {"type": "engine_lost", "engine_id": ENGINE, "time": 101.0, "engine": OLD}
    same = {"type": "engine_joined", "engine_id": ENGINE, "time": 109.0, "engine": OLD}
    result = judged("engine-zk", [cut], [], [lost, same])
    assert result.false_events == [f"engine_lost {ENGINE}"]


def test_a_loss_from_a_cut_shorter_than_the_timeout_is_true_when_zookeeper_ended_it() -> None:
    """ZooKeeper expires a session a timeout after it last heard the client, which pings
    every third of it when idle: a cut of 0.7 of the timeout can end the session (the
    CI run of 6 Dec reported such a loss as false). The new session proves it."""
    cut = Cut(100.0, 100.0 + SESSION_TIMEOUT * 0.7, ENGINE, recovered=0.5)
    lost = {"type": "engine_lost", "engine_id": ENGINE, "time": 102.5, "engine": OLD}
    back = {"type": "engine_joined", "engine_id": ENGINE, "time": 103.5, "engine": NEW}
    result = judged("engine-zk", [cut], [], [lost, back])
    assert result.failures() == []
    assert result.expiries == 1


def test_a_loss_of_an_engine_no_cut_touched_is_false_in_engine_zk() -> None:
    cut = Cut(100.0, 110.0, "engine-2", recovered=0.5)
    lost = {"type": "engine_lost", "engine_id": ENGINE, "time": 104.5, "engine": OLD}
    back = {"type": "engine_joined", "engine_id": ENGINE, "time": 110.5, "engine": NEW}
    assert judged("engine-zk", [cut], [], [lost, back]).false_events == [f"engine_lost {ENGINE}"]


def test_a_lost_page_a_crawl_that_never_ends_and_a_cut_never_recovered_fail() -> None:
    result = Result("monitor-zk", cuts=[Cut(1.0, 2.0, "monitor", recovered=None)], lost=3)
    assert result.failures() == [
        "3 pages lost",
        f"the crawl did not end within {END_LIMIT:.0f} s of the last heal",
        f"1 cuts never recovered within {partitions.RECOVERY_LIMIT:.0f} s",
    ]


def test_a_process_of_the_run_left_behind_is_found() -> None:
    mark = ("NDC_ZK_DIGEST", f"netdisco:test-{os.getpid()}")
    child = subprocess.Popen(["sleep", "60"], env={**os.environ, mark[0]: mark[1]})
    try:
        found = leftovers(mark)
        assert [f for f in found if f.startswith("process")] == [f"process {child.pid}: sleep 60 "]
    finally:
        child.kill()
        child.wait()
    assert not [f for f in leftovers(mark) if f.startswith("process")]


def test_the_engines_frontier_url_joins_a_scenarios_options_to_owned_hosts(tmp_path: Any) -> None:
    cluster = Cluster(tmp_path)
    base = f"redis://{MACHINES['redis']}:{REDIS_PORT}/0"
    assert cluster.frontier() == f"{base}?politeness=owner"
    assert cluster.frontier("?lease_ttl=5") == f"{base}?politeness=owner&lease_ttl=5"
    assert f'frontier = "{base}?politeness=owner&lease_ttl=5"' in cluster.engine_toml(
        ENGINE, crawl=True, extra="?lease_ttl=5"
    )


def test_the_sites_pages_spread_over_its_hosts() -> None:
    base = f"http://{MACHINES['site']}:{SITE_PORT}"
    ports = {urlsplit(page_url(base, n, hosts=8)).port for n in range(16)}
    assert ports == set(range(SITE_PORT, SITE_PORT + 8))
    assert page_url(base, 9, hosts=8) == f"http://{MACHINES['site']}:{SITE_PORT + 1}/p/9"
