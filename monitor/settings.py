"""The monitor's settings as frozen keyword-only dataclasses, defaults in one place.

:mod:`monitor.config` fills them from TOML, the environment and flags;
:mod:`monitor.validate` checks each value before it gets here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from monitor.events import EventType
from netdisco.cluster.settings import ZooKeeperSettings


@dataclass(frozen=True, kw_only=True)
class HttpSettings:
    """``[http]``: the monitor's own endpoint and what it polls for the dashboard."""

    host: str = "127.0.0.1"
    port: int = 8316  # 0: any free port (tests)
    recent_events: int = 500
    poll_status: float = 5.0  # s between reads of each engine's pages/s; 0: never


@dataclass(frozen=True, kw_only=True)
class AlertSettings:
    """``[alerts]``: when offline hooks run, how failed deliveries are retried."""

    grace: float  # default: session_timeout + 5
    state_file: Path | None = None
    batch_window: float = 2.0  # e-mails: events within it go out as one message
    max_age: float = 3600.0  # a failing alert is retried until this old, then dropped
    retry_initial: float = 0.5
    retry_max: float = 60.0
    hook_timeout: float = 10.0
    offline_events: frozenset[EventType] = frozenset(
        {EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY}
    )
    leave_window: float | None = None  # deprecated, ignored: tombstones tell leaves


@dataclass(frozen=True, kw_only=True)
class EmailSettings:
    """``[email]``: SMTP; credentials come from the variables named in the file."""

    sender: str
    to: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = 25
    starttls: bool = False
    tls: bool = False
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    events: frozenset[EventType] = frozenset({EventType.ENGINE_LOST, EventType.CLUSTER_EMPTY})
    subject_prefix: str = "[netdisco]"


@dataclass(frozen=True, kw_only=True)
class WebhookSettings:
    """``[webhook]``: POST of each event's JSON."""

    url: str
    events: frozenset[EventType] = frozenset({EventType.ENGINE_LOST})


@dataclass(frozen=True, kw_only=True)
class CommandSettings:
    """``[command]``: a program run with the event JSON on stdin."""

    argv: tuple[str, ...]
    events: frozenset[EventType] = frozenset({EventType.ENGINE_LOST})
    timeout: float = 10.0


@dataclass(frozen=True, kw_only=True)
class CallableSettings:
    """``[callable]``: a Python function loaded by dotted path."""

    target: str  # "package.module:function" or "package.module.function"
    events: frozenset[EventType] = frozenset({EventType.ENGINE_LOST})


@dataclass(frozen=True, kw_only=True)
class ControlSettings:
    """``[control]``: pause/resume/stop through the monitor; both tokens come from variables."""

    engine_token: str | None = field(default=None, repr=False)  # sent to engines, never shown
    token: str | None = field(default=None, repr=False)  # what the monitor's own routes want
    timeout: float = 5.0  # seconds one call to an engine may take


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
    log_json: bool | None = None  # None: JSON when stderr is not a TTY
    log_level: str = "info"
