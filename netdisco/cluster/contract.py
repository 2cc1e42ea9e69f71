"""The engine-monitor contract: what an engine writes in ZooKeeper and what it means.

Every engine keeps one ephemeral node ``<root>/<engine id>`` (root
``/netdiscovery`` by default) holding a UTF-8 JSON object, an
:class:`EnginePayload`. Its ``state`` is ``running`` while the engine lives. A
graceful stop is one transaction: the ``leaving`` write, a persistent
*tombstone* ``<root>.left/<engine id>@<czxid in hex>`` and the versioned delete
(:func:`netdisco.cluster.tombstones.leave_transaction`). A node gone without its
tombstone was lost. Engines since contract 2 (``contract`` in the payload) write
tombstones; for older ones readers fall back to the ``leaving`` write and its
timing. The monitor turns changes of the root's children into the
:class:`EventType` events, and Redis engines return a lost engine's leases (its
``incarnation``). The whole contract, with the reasons behind it, is in
``docs/architecture.md``.

Everybody parses node data through :func:`parse_payload`, which never raises:
whatever a node holds (garbage, a JSON array, wrong types, more than
:data:`MAX_NODE_DATA` bytes) comes back as a payload with what could be read and
``garbage`` set when nothing could.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from netdisco.exceptions import ConfigError

DEFAULT_ROOT = "/netdiscovery"

#: The contract an engine writes (``contract`` in its payload). 2: leaves leave a
#: tombstone; 3: with an engine token, the node and the tombstone carry proofs
#: (netdisco.cluster.proof). A payload without the key is contract 1 (no tombstones).
CONTRACT = 3
TOMBSTONE_CONTRACT = 2
#: the header on every answer of an engine's HTTP routes: the id of the engine that gave
#: it. The monitor checks it on every poll and sends it with every control request, which
#: an engine of another id refuses (409 ``wrong_engine``): an address now served by
#: another engine is never shown or controlled as this one.
ENGINE_HEADER = "X-Netdisco-Engine"
#: from this contract on, an engine of a cluster with a token proves its node and tombstone
PROOF_CONTRACT = 3

#: How long tombstones are kept (their ``ctime``) before the monitor, or the
#: engine that wrote them at its next start, deletes them.
TOMBSTONE_MAX_AGE = 86400.0

#: The most a node's data may hold to be read as a payload (an engine writes a few
#: hundred bytes); anything bigger is garbage, never decoded, so a foreign writer
#: cannot fill a reader's memory with one node (ZooKeeper allows about 1 MB).
MAX_NODE_DATA = 64 * 1024

#: Contract 1 engines only: a ``leaving`` write notified this close before the
#: deletion means the engine left (the rule before tombstones).
LEGACY_LEAVE_WINDOW = 0.5

#: Node facts (``EnginePayload.facts``): numbers (``cpu_percent`` and ``load1`` are
#: floats, the rest bytes or counts), texts (versions) and ``disk_free``, bytes free
#: per directory name (``state``, ``feeds``). Readers keep only these, bounded.
FACT_FLOATS = frozenset({"cpu_percent", "load1"})
FACT_NUMBERS = ("cpu_percent", "load1", "memory_total", "memory_available", "rss", "open_fds")
FACT_TEXTS = ("python", "netdisco")
MAX_FACT_TEXT = 64  # longest text a reader keeps (a version, a directory or crawl name)
MAX_DISKS = 8


class NodeState(StrEnum):
    """The ``state`` an engine writes into its node."""

    RUNNING = "running"
    LEAVING = "leaving"  # written in the same transaction as the deletion


class EventType(StrEnum):
    """What the monitor reports; the values are the public event names."""

    ENGINE_JOINED = "engine_joined"
    ENGINE_LEFT = "engine_left"  # deleted its node after writing state "leaving"
    ENGINE_LOST = "engine_lost"  # vanished without leaving (crash, expiry)
    ENGINE_RESTARTED = "engine_restarted"  # same name, new node (czxid) between two looks
    ENGINE_UPDATED = "engine_updated"  # same node, new data
    ENGINE_FLAPPED = "engine_flapped"  # lost, then back within the grace period
    CLUSTER_EMPTY = "cluster_empty"
    ZK_DISCONNECTED = "zk_disconnected"
    ZK_RECONNECTED = "zk_reconnected"
    ALERT_STORM = "alert_storm"  # a hook's events past [alerts] storm_limit, folded into one
    PROJECT_DEPLOYED = "project_deployed"  # a project version uploaded through a monitor
    JOB_STARTED = "job_started"  # a job's process runs on an engine
    JOB_FINISHED = "job_finished"
    JOB_FAILED = "job_failed"
    JOB_CANCELLED = "job_cancelled"
    JOB_LOST = "job_lost"  # its engine went (or stopped) before the job ended
    SCHEDULE_FIRED = "schedule_fired"  # a schedule's tick made a job (told by one monitor)
    SCHEDULE_SKIPPED = "schedule_skipped"  # a tick while its previous job was still going
    # the monitor's health rules (monitor/rules.py), from status polls and znode data
    ENGINE_STALLED = "engine_stalled"  # its znode says its event loop is stuck
    ENGINE_RECOVERED = "engine_recovered"  # no longer stalled, after an engine_stalled
    DISK_FREE_BELOW = "disk_free_below"  # one of its directories' disks is nearly full
    SPIDER_FAILED = "spider_failed"  # a run ended failed
    SPIDER_FINISHED_EMPTY = "spider_finished_empty"  # a run finished with too few items
    SPIDER_ERROR_RATIO = "spider_error_ratio"  # too many failed requests over a window
    SPIDER_STALLED = "spider_stalled"  # running, requests queued, no page for stall_after
    SPIDER_ITEMS_INVALID = "spider_items_invalid"  # a run's items_invalid reached its rule
    # what changed in a znode's spider list (an engine_updated says only that it changed)
    SPIDER_STARTED = "spider_started"
    SPIDER_PAUSED = "spider_paused"
    SPIDER_RESUMED = "spider_resumed"
    SPIDER_STOPPED = "spider_stopped"
    SPIDER_FINISHED = "spider_finished"


@dataclass(frozen=True, kw_only=True)
class SpiderSummary:
    """One spider as the node lists it."""

    name: str
    state: str
    next_run: float | None = None  # Unix seconds of its next scheduled run, if scheduled
    pages: int | None = None  # pages crawled by this run on this engine (None: not said)
    items: int | None = None  # items scraped by this run on this engine
    failed: int | None = None  # requests kept in the failed store (the crawl's, see ``crawl``)
    #: a stable identity of the frontier this spider shares with other engines (a hash
    #: of the Redis URL and key prefix), so that a reader counts a shared queue once;
    #: None for a private frontier (memory, SQLite)
    crawl: str | None = None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


#: at most this many spiders an engine's node offers to jobs (more: the first ones)
MAX_JOB_SPIDERS = 500


def _job_spiders(value: Any) -> dict[str, str]:
    """``module:Class`` -> name, each at most 200 characters, at most ``MAX_JOB_SPIDERS``."""
    pairs = _labels(value).items()
    fit = ((k, v) for k, v in pairs if len(k) <= 200 and len(v) <= 200)
    return dict(list(fit)[:MAX_JOB_SPIDERS])


#: what a running job's entry in ``job_stats`` holds (the names of its final ``stats``)
JOB_COUNTERS = ("succeeded", "failed", "items", "items_kept", "items_dropped")
#: at most this many running jobs' counters are read from a node
MAX_JOB_STATS = 1000


def _job_stats(value: Any) -> dict[str, dict[str, int]]:
    """Job id (at most 40 characters) -> its ``JOB_COUNTERS`` that are counts."""
    if not isinstance(value, dict):
        return {}
    found: dict[str, dict[str, int]] = {}
    for job, counts in list(value.items())[:MAX_JOB_STATS]:
        if isinstance(job, str) and len(job) <= 40 and isinstance(counts, dict):
            read = {k: _count(counts.get(k)) for k in JOB_COUNTERS}
            found[job] = {k: v for k, v in read.items() if v is not None}
    return found


def _names(value: Any) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _count(value: Any) -> int | None:
    number = _int(value)
    return number if number is not None and 0 <= number < 2**63 else None


def _short(value: Any, limit: int = MAX_FACT_TEXT) -> str | None:
    return value if isinstance(value, str) and len(value) <= limit else None


def _spiders(value: Any) -> tuple[SpiderSummary, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        SpiderSummary(
            name=item["name"],
            state=str(item.get("state", "unknown")),
            next_run=_float(item.get("next_run")),
            pages=_count(item.get("pages")),
            items=_count(item.get("items")),
            failed=_count(item.get("failed")),
            crawl=_short(item.get("crawl")),
        )
        for item in value
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    )


def _fact_number(value: Any) -> float | None:
    number = _float(value)
    return number if number is not None and math.isfinite(number) and number >= 0 else None


def _disk_free(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    pairs = ((_short(k), _count(v)) for k, v in value.items())
    kept = {k: v for k, v in pairs if k is not None and v is not None}
    return dict(list(kept.items())[:MAX_DISKS])


def parse_facts(value: Any) -> dict[str, Any]:
    """Node facts as written by :func:`netdisco.engine.facts`: known keys of the right
    type and size only (anything else dropped); never raises."""
    if not isinstance(value, dict):
        return {}
    facts: dict[str, Any] = {}
    for key in FACT_NUMBERS:
        number = _fact_number(value.get(key))
        if number is not None:
            facts[key] = number if key in FACT_FLOATS else int(number)
    for key in FACT_TEXTS:
        text = _short(value.get(key))
        if text is not None:
            facts[key] = text
    disks = _disk_free(value.get("disk_free"))
    if disks:
        facts["disk_free"] = disks
    return facts


@dataclass(frozen=True, kw_only=True)
class EnginePayload:
    """The data of an engine's node; ``None`` where the node did not say (or said garbage)."""

    id: str | None = None
    incarnation: str | None = None  # new for every engine object: labels its Redis leases
    host: str | None = None
    port: int | None = None
    status_url: str | None = None  # where the engine serves GET /netdiscovery/engine
    pid: int | None = None
    version: str | None = None
    started_at: float | None = None
    spiders: tuple[SpiderSummary, ...] = ()
    state: str = "unknown"  # a NodeState value, or whatever a foreign writer put there
    contract: int | None = None  # CONTRACT of the writer; None: contract 1 (no tombstones)
    max_jobs: int | None = None  # job slots (netdisco.cluster.jobs); None: runs no jobs
    labels: Mapping[str, str] = field(default_factory=dict)  # for placement "label=value"
    jobs: tuple[str, ...] = ()  # ids of the jobs running on the engine now
    #: ``module:Class`` -> name of the spiders its ``spider_modules`` offer to jobs of no
    #: project, as imported when it started ({}: not said)
    job_spiders: Mapping[str, str] = field(default_factory=dict)
    #: the counters of the jobs running on the engine now, by job id (``JOB_COUNTERS``),
    #: refreshed with its spiders' figures: how a job's progress reaches the monitor
    job_stats: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: True while the engine's loop has not run for ``loop_stall`` seconds (written by
    #: its watchdog thread); None from writers that do not measure it
    stalled: bool | None = None
    loop_lag: float | None = None  # seconds: the last measured lag of the engine's loop
    facts: Mapping[str, Any] = field(default_factory=dict)  # see FACT_NUMBERS, parse_facts
    proof: str | None = None  # a cluster member wrote this node (netdisco.cluster.proof)
    left_proof: str | None = None  # ... and, in a tombstone, this leave
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys of newer writers, kept
    garbage: bool = False  # the data was not a UTF-8 JSON object

    @property
    def tombstones(self) -> bool:
        """Whether this engine's graceful leave leaves a tombstone (contract 2 and up)."""
        return self.contract is not None and self.contract >= TOMBSTONE_CONTRACT

    @property
    def leaving(self) -> bool:
        """Whether the engine said it is leaving (a graceful stop)."""
        return self.state == NodeState.LEAVING

    def with_state(self, state: NodeState) -> EnginePayload:
        """The same payload in another state."""
        return replace(self, state=state.value)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written into the node (unknown keys kept as read)."""
        data: dict[str, Any] = dict(self.extra)
        for f in fields(self):
            if f.name in ("extra", "garbage"):
                continue
            value = getattr(self, f.name)
            if f.name in _OPTIONAL and _unset(value):
                continue  # not measured, or runs no jobs: left out, as older writers do
            if f.name == "spiders":
                value = [_spider_dict(s) for s in value]
            elif f.name in ("labels", "facts", "job_spiders"):
                value = dict(value)
            elif f.name == "job_stats":
                value = {job: dict(counts) for job, counts in value.items()}
            elif f.name == "jobs":
                value = list(value)
            data[f.name] = value
        return data

    def to_json(self) -> bytes:
        """Compact, sorted UTF-8 JSON: equal payloads give equal bytes (no needless writes)."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode()


def _spider_dict(spider: SpiderSummary) -> dict[str, Any]:
    data: dict[str, Any] = {"name": spider.name, "state": spider.state}
    for key in ("next_run", "pages", "items", "failed", "crawl"):
        value = getattr(spider, key)
        if value is not None:
            data[key] = value
    return data


#: health keys written only when measured (an older reader sees the payload it knew)
def _unset(value: Any) -> bool:
    """None, or an empty table or list: a field its writer did not measure or use."""
    return value is None or (isinstance(value, Mapping | tuple) and not value)


_OPTIONAL = frozenset(
    {"stalled", "loop_lag", "facts", "max_jobs", "labels", "jobs", "job_spiders", "job_stats",
     "proof", "left_proof"}
)  # fmt: skip
_KNOWN = frozenset(f.name for f in fields(EnginePayload)) - {"extra", "garbage"}


def payload_from_dict(data: Mapping[str, Any]) -> EnginePayload:
    """A payload from a decoded JSON object; wrong types read as unknown (``None``)."""
    state = data.get("state")
    return EnginePayload(
        id=_str(data.get("id")),
        incarnation=_str(data.get("incarnation")),
        host=_str(data.get("host")),
        port=_int(data.get("port")),
        status_url=_str(data.get("status_url")),
        pid=_int(data.get("pid")),
        version=_str(data.get("version")),
        started_at=_float(data.get("started_at")),
        spiders=_spiders(data.get("spiders")),
        state=state if isinstance(state, str) else "unknown",
        contract=_int(data.get("contract")),
        max_jobs=_int(data.get("max_jobs")),
        labels=_labels(data.get("labels")),
        jobs=_names(data.get("jobs")),
        job_spiders=_job_spiders(data.get("job_spiders")),
        job_stats=_job_stats(data.get("job_stats")),
        stalled=_bool(data.get("stalled")),
        loop_lag=_fact_number(data.get("loop_lag")),
        facts=parse_facts(data.get("facts")),
        proof=_short(data.get("proof"), 128),
        left_proof=_short(data.get("left_proof"), 128),
        extra={k: v for k, v in data.items() if k not in _KNOWN},
    )


def decode_object(raw: bytes | None) -> dict[str, Any] | None:
    """Node data as a JSON object, or None when it is not one (garbage) or too big."""
    if raw is not None and len(raw) > MAX_NODE_DATA:
        return None
    try:
        data = json.loads((raw or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def parse_payload(raw: bytes | None) -> EnginePayload:
    """Whatever a node holds, as a payload; never raises."""
    data = decode_object(raw)
    if data is None:
        return EnginePayload(garbage=True)
    return payload_from_dict(data)


def check_engine_id(engine_id: str) -> None:
    """An engine id is one znode name: no '/', not '.' or '..', no control characters."""
    if (
        not engine_id
        or "/" in engine_id
        or engine_id in (".", "..")
        or any(ord(ch) < 32 or ord(ch) == 127 for ch in engine_id)
    ):
        raise ConfigError("engine.id", f"{engine_id!r} cannot be a ZooKeeper node name")


def engine_path(root: str, engine_id: str) -> str:
    """The node an engine keeps: ``<root>/<engine id>``."""
    check_engine_id(engine_id)
    return f"{root.rstrip('/')}/{engine_id}"


def tombstone_root(root: str) -> str:
    """Where tombstones live: a sibling of the root, ``<root>.left``, outside its watch."""
    return root.rstrip("/") + ".left"


def tombstone_name(engine_id: str, czxid: int) -> str:
    """A tombstone names one node: ``<engine id>@<czxid in hex>``."""
    check_engine_id(engine_id)
    return f"{engine_id}@{czxid:x}"


def tombstone_path(root: str, engine_id: str, czxid: int) -> str:
    """The tombstone a graceful leave of node ``(engine_id, czxid)`` creates."""
    return f"{tombstone_root(root)}/{tombstone_name(engine_id, czxid)}"


def tombstone_owner(name: str) -> tuple[str, int] | None:
    """``(engine id, czxid)`` of a tombstone name, or None for any other name."""
    engine_id, sep, czxid = name.rpartition("@")
    if not sep or not engine_id:
        return None
    try:
        return engine_id, int(czxid, 16)
    except ValueError:
        return None
