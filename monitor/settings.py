"""The monitor's settings: one frozen keyword-only dataclass per TOML section.

Each field carries its default, its one-line doc and its check
(:func:`netdisco.schema.setting`), so a settings object made in code is checked
as one read from a file; :mod:`monitor.config` fills them from TOML, the
environment and flags through the one loader, :func:`netdisco.schema.load`.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from monitor.events import EventType
from netdisco.cluster.settings import ZooKeeperSettings
from netdisco.exceptions import ConfigError
from netdisco.schema import Section, non_negative, one_of, positive, setting
from netdisco.values import convert

_TARGET = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")
LEVELS = ("debug", "info", "warning", "error")
LOST = frozenset({EventType.ENGINE_LOST})
OFFLINE = frozenset({EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY})


def _events(key: str, value: Any) -> frozenset[EventType]:
    """Event names (a list, or comma-separated text) as event types; unknown ones refused."""
    names = convert(key, value, tuple[str, ...])
    known = {e.value for e in EventType}
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(key, f"unknown event {bad[0]!r}; known: {', '.join(sorted(known))}")
    return frozenset(EventType(n) for n in names)


def _path(key: str, value: Any) -> Path | None:
    text = str(value) if isinstance(value, Path) else convert(key, value, str)
    return Path(text).expanduser() if text else None


def _directory_exists(path: Path) -> str | None:
    ok = path.parent.is_dir()
    return None if ok else f"directory of {str(path)!r} does not exist"


def _above_zero(value: float) -> str | None:
    return positive(value) and (_finite(value) or f"must be > 0, not {value}")


def _at_least_zero(value: float) -> str | None:
    return non_negative(value) and (_finite(value) or f"must be >= 0, not {value}")


def _finite(value: float) -> str | None:
    return None if math.isfinite(value) else f"must be a finite number, got {value!r}"


def _port(value: int) -> str | None:
    return None if 0 <= value <= 65535 else f"must be a TCP port (0-65535), not {value}"


def _address(value: str) -> str | None:
    return None if "@" in value else f"{value!r} is not an e-mail address"


def _addresses(values: tuple[str, ...]) -> str | None:
    if not values:
        return "is required when [email] is present"
    return next((p for p in map(_address, values) if p is not None), None)


def _url(url: str) -> str | None:
    parts = urlsplit(url)
    ok = parts.scheme in ("http", "https") and parts.netloc
    return None if ok else f"must be an http(s) URL, not {url!r}"


#: the charts keep one slot a minute per spider: this bounds them (docs/monitor.md#charts)
MAX_HISTORY_HOURS = 48.0


def _history_hours(value: float) -> str | None:
    ok = 1 <= value <= MAX_HISTORY_HOURS
    return None if ok else f"must be within 1-{MAX_HISTORY_HOURS:g}, not {value}"


def _field(section: str, default: Any, doc: str, **more: Any) -> Any:
    return setting(default, section=section, doc=doc, **more)


@dataclass(frozen=True, kw_only=True)
class HttpSettings(Section):
    """``[http]``: the monitor's own endpoint and what it polls for the dashboard."""

    PREFIX: ClassVar[str] = "http."

    host: str = _field("http", "127.0.0.1", "address the monitor serves on")
    port: int = _field("http", 8316, "its port (0: any free one)", check=_port)
    recent_events: int = _field(
        "http",
        500,
        "events kept for the dashboard",
        check=lambda n: None if n >= 1 else f"must be >= 1, not {n}",
    )
    poll_status: float = _field(
        "http",
        5.0,
        "seconds between reads of each engine's pages/s (0: never)",
        check=_at_least_zero,
    )
    history_hours: float = _field(
        "http",
        6.0,
        f"hours of pages/s, items/s and errors/s the charts keep (1-{MAX_HISTORY_HOURS:g})",
        check=_history_hours,
    )
    offline_retention: float = _field(
        "http",
        3600.0,
        "seconds the dashboard keeps listing an engine that left or was lost",
        check=_at_least_zero,
    )


def _ratio(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else f"must be within 0-1 (0: off), not {value}"


@dataclass(frozen=True, kw_only=True)
class RuleSettings(Section):
    """``[rules]``: when a spider or an engine is reported unwell (monitor/rules.py)."""

    PREFIX: ClassVar[str] = "rules."

    min_items: int = _field(
        "rules", 1, "spider_finished_empty below this many items (0: off)", check=non_negative
    )
    items_invalid: int = _field(
        "rules", 1, "spider_items_invalid once a run has this many items off its schema (0: off)",
        check=non_negative,
    )  # fmt: skip
    error_ratio: float = _field(
        "rules", 0.5, "spider_error_ratio above this share of failed requests (0: off)",
        check=_ratio,
    )  # fmt: skip
    error_window: float = _field(
        "rules", 300.0, "seconds over which that share is counted", check=_above_zero
    )
    error_min_requests: int = _field(
        "rules", 20, "requests a window needs before its share counts", check=positive
    )
    stall_after: float = _field(
        "rules", 300.0, "spider_stalled after this long without a page, queue not empty (0: off)",
        check=_at_least_zero,
    )  # fmt: skip
    disk_free_below: int = _field(
        "rules", 1 << 30, "disk_free_below under this many bytes free (0: off)",
        check=non_negative,
    )  # fmt: skip
    grace: float = _field(
        "rules", 30.0, "seconds an error ratio or a low disk must last before it is reported",
        check=_at_least_zero,
    )  # fmt: skip
    loop_grace: float = _field(
        "rules", 1.0, "seconds an engine's stalled loop must last (its own loop_stall waited "
        "already)", check=_at_least_zero,
    )  # fmt: skip
    tick: float = _field(
        "rules", 1.0, "seconds between checks of lasting conditions while nothing is read",
        check=_above_zero,
    )  # fmt: skip
    rearm: float = _field(
        "rules", 600.0, "seconds a reported condition must be clear before it is reported again",
        check=_at_least_zero,
    )  # fmt: skip
    dashboard_url: str | None = _field(
        "rules", None, "the dashboard link events carry (none: the monitor's own address)",
        check=lambda u: None if u is None else _url(u),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AlertSettings(Section):
    """``[alerts]``: when offline hooks run, how failed deliveries are retried."""

    PREFIX: ClassVar[str] = "alerts."

    grace: float = _field(
        "alerts",
        MISSING,
        "seconds a lost engine waits before alerts (zookeeper.session_timeout + 5)",
        check=_at_least_zero,
    )
    state_file: Path | None = _field(  # noqa: RUF009 (a field, not a call per instance)
        "alerts",
        None,
        "where the last view is kept across restarts",
        parse=_path,
        check=_directory_exists,
    )
    batch_window: float = _field(
        "alerts",
        2.0,
        "seconds within which e-mailed events go out as one message (and storms are folded)",
        check=_at_least_zero,
    )
    storm_limit: int = _field(
        "alerts",
        10,
        "deliveries a webhook, command or callable hook gets one by one per batch_window; "
        "the rest of that window go as one alert_storm event (0: never fold)",
        check=_at_least_zero,
    )
    max_age: float = _field(
        "alerts", 3600.0, "a failing alert is retried until this old", check=_above_zero
    )
    retry_initial: float = _field("alerts", 0.5, "first retry delay", check=_above_zero)
    retry_max: float = _field("alerts", 60.0, "longest retry delay", check=_above_zero)
    hook_timeout: float = _field("alerts", 10.0, "seconds one hook may take", check=_above_zero)
    offline_events: frozenset[EventType] = _field(
        "alerts", OFFLINE, "events that wait out the grace period", parse=_events
    )
    leave_window: float | None = _field(
        "alerts", None, "deprecated, ignored: tombstones tell leaves", check=_above_zero
    )


@dataclass(frozen=True, kw_only=True)
class EmailSettings(Section):
    """``[email]``: SMTP; credentials come from the variables named in the file."""

    PREFIX: ClassVar[str] = "email."

    sender: str = _field(
        "email",
        MISSING,
        "From address",
        check=_address,
        required="is required when [email] is present",
    )
    to: tuple[str, ...] = _field(
        "email",
        MISSING,
        "recipients",
        check=_addresses,
        required="is required when [email] is present",
    )
    host: str = _field("email", "127.0.0.1", "SMTP server")
    port: int = _field("email", 25, "its port", check=_port)
    starttls: bool = _field("email", False, "upgrade the connection with STARTTLS")
    tls: bool = _field("email", False, "implicit TLS")
    username_env: str | None = _field("email", None, "variable holding the SMTP user")
    password_env: str | None = _field("email", None, "variable holding the SMTP password")
    username: str | None = _field(
        "email", None, "(read from username_env)", loaded=False, shown=False
    )
    password: str | None = _field(
        "email", None, "(read from password_env)", loaded=False, shown=False
    )
    events: frozenset[EventType] = _field("email", OFFLINE, "events e-mailed", parse=_events)
    subject_prefix: str = _field("email", "[netdisco]", "subject line prefix")

    def check(self) -> None:
        if self.starttls and self.tls:
            raise ConfigError("email.tls", "choose either tls (implicit) or starttls, not both")


@dataclass(frozen=True, kw_only=True)
class WebhookSettings(Section):
    """``[webhook]``: POST of each event's JSON."""

    PREFIX: ClassVar[str] = "webhook."

    url: str = _field(
        "webhook",
        MISSING,
        "where events are POSTed",
        check=_url,
        required="is required when [webhook] is present",
    )
    events: frozenset[EventType] = _field("webhook", LOST, "events posted", parse=_events)


@dataclass(frozen=True, kw_only=True)
class CommandSettings(Section):
    """``[command]``: a program run with the event JSON on stdin."""

    PREFIX: ClassVar[str] = "command."

    argv: tuple[str, ...] = _field(
        "command",
        MISSING,
        "the program and its arguments",
        check=lambda a: None if a else "is required: the program and its arguments",
        required="is required: the program and its arguments",
    )
    events: frozenset[EventType] = _field("command", LOST, "events it runs for", parse=_events)
    timeout: float = _field("command", 10.0, "seconds it may take", check=_above_zero)


@dataclass(frozen=True, kw_only=True)
class CallableSettings(Section):
    """``[callable]``: a Python function loaded by dotted path."""

    PREFIX: ClassVar[str] = "callable."

    target: str = _field(
        "callable",
        MISSING,
        "'package.module:function'",
        check=lambda p: (
            None if _TARGET.match(p) else f"must be 'package.module:function', not {p!r}"
        ),
        required="is required when [callable] is present",
    )
    events: frozenset[EventType] = _field(
        "callable", LOST, "events it is called for", parse=_events
    )


@dataclass(frozen=True, kw_only=True)
class ControlSettings(Section):
    """``[control]``: pause/resume/stop through the monitor; both tokens come from variables."""

    PREFIX: ClassVar[str] = "control."

    #: where the tokens come from (not compared: two settings with the same tokens are equal)
    token_env: str | None = _field(
        "control", None, "variable holding the token sent to engines", compared=False
    )
    monitor_token_env: str | None = _field(
        "control", None, "variable holding the token the monitor's own routes want", compared=False
    )
    engine_token: str | None = _field(
        "control", None, "(read from token_env)", loaded=False, shown=False
    )
    token: str | None = _field(
        "control", None, "(read from monitor_token_env)", loaded=False, shown=False
    )
    timeout: float = _field(
        "control", 5.0, "seconds one call to an engine may take", check=_above_zero
    )
    engine_hosts: tuple[str, ...] = _field(
        "control",
        (),
        "hosts besides loopback that get the engine token (a status_url's host, exactly)",
    )
    deploy_token_env: str | None = _field(
        "control",
        None,
        "variable holding the token that deploys projects (none: deploy from loopback only)",
        compared=False,
    )
    deploy_token: str | None = _field(
        "control", None, "(read from deploy_token_env)", loaded=False, shown=False
    )
    max_project_size: int = _field(
        "control",
        8 * 1024 * 1024,
        "bytes a project archive may have (stored in ZooKeeper, which keeps all in memory)",
        check=lambda n: None if 0 < n <= 64 * 1024 * 1024 else f"must be 1 to 67108864, not {n}",
    )

    def check(self) -> None:
        if self.token is not None and not self.token.strip():
            raise ConfigError("control.monitor_token_env", "the variable it names is empty")
        if self.deploy_token is not None and self.deploy_token == self.token:
            raise ConfigError(
                "control.deploy_token_env", "the deploy token must differ from the control token"
            )


@dataclass(frozen=True, kw_only=True)
class JobsSettings(Section):
    """``[jobs]``: how the monitor places jobs and how long their history is kept."""

    PREFIX: ClassVar[str] = "jobs."

    poll: float = _field("jobs", 0.5, "seconds between two looks at the jobs", check=_above_zero)
    history: int = _field(
        "jobs", 1000, "ended jobs kept (the oldest beyond are deleted)", check=_at_least_zero
    )
    history_days: float = _field("jobs", 30.0, "days an ended job is kept", check=_above_zero)
    max_attempts: int = _field(
        "jobs", 3, "placements of one job with on_lost = requeue", check=_above_zero
    )


@dataclass(frozen=True, kw_only=True)
class LogSettings(Section):
    """``[log]``: how the monitor logs."""

    PREFIX: ClassVar[str] = "log."

    json: bool | None = _field("log", None, "JSON lines (none: when stderr is not a TTY)")
    level: str = _field(
        "log",
        "info",
        "debug, info, warning or error",
        parse=lambda key, v: convert(key, v, str).lower(),
        check=one_of(*LEVELS, problem=f"must be one of {', '.join(LEVELS)}"),
    )


@dataclass(frozen=True, kw_only=True)
class MonitorConfig:
    """Every setting of one monitor; an absent hook section is ``None``."""

    zookeeper: ZooKeeperSettings
    alerts: AlertSettings
    http: HttpSettings = HttpSettings()
    email: EmailSettings | None = None
    webhook: WebhookSettings | None = None
    command: CommandSettings | None = None
    callable: CallableSettings | None = None
    control: ControlSettings | None = None  # None: no control routes
    rules: RuleSettings = RuleSettings()
    log: LogSettings = LogSettings()
    jobs: JobsSettings = JobsSettings()
