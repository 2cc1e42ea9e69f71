"""What the monitor does about events: e-mail, webhook, command, Python callable.

Every hook is the same narrow protocol: ``deliver(events)`` raises on failure
and :mod:`monitor.alerts` owns timeouts, retries and batching, so a hook only
says how to send. The log "hook" is not here: the daemon logs every event
itself, always, before any hook runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import importlib
import inspect
import json
import os
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from email.message import EmailMessage
from typing import Any, Protocol

import aiohttp
import aiosmtplib

from monitor.events import Event, EventType, iso
from monitor.settings import (
    CallableSettings,
    CommandSettings,
    EmailSettings,
    MonitorConfig,
    WebhookSettings,
)
from monitor.threads import HookThreads
from netdisco.exceptions import ConfigError, HookError

#: seconds between TERM and KILL for a command that overstays its timeout
KILL_GRACE = 1.0
#: threads a sync callable hook may occupy at once (hung calls keep theirs)
HOOK_THREADS = 4
#: events one e-mail describes in full (a storm's rest is counted by kind)
MAX_DESCRIBED = 50


class Hook(Protocol):
    """One way of acting on events. ``batch``: events may arrive several at a time."""

    name: str
    events: frozenset[EventType]
    batch: bool

    async def deliver(self, events: Sequence[Event]) -> None: ...

    async def aclose(self) -> None: ...


def build_hooks(config: MonitorConfig) -> list[Hook]:
    """The hooks the configuration asks for, checked now so that errors show at start."""
    hooks: list[Hook] = []
    if config.email is not None:
        hooks.append(EmailHook(config.email))
    if config.webhook is not None:
        hooks.append(WebhookHook(config.webhook))
    if config.command is not None:
        hooks.append(CommandHook(config.command, config.alerts.hook_timeout))
    if config.callable is not None:
        hooks.append(CallableHook(config.callable))
    return hooks


def _spiders(engine: dict[str, Any]) -> str:
    spiders = engine.get("spiders")
    if not isinstance(spiders, list) or not spiders:
        return "(none reported)"
    return ", ".join(
        f"{s.get('name', '?')} ({s.get('state', '?')})" if isinstance(s, dict) else str(s)
        for s in spiders
    )


def _when(value: Any) -> str:
    return iso(value) if isinstance(value, int | float) and value > 0 else "unknown"


def describe(event: Event) -> str:
    """A plain-text paragraph about one event, for people (e-mail body)."""
    engine = event.engine
    lines = [
        f"{event.type.value} at {iso(event.time)}",
        f"  engine:     {event.engine_id or engine.get('id', '-')}",
        f"  host:       {engine.get('host', 'unknown')}:{engine.get('port', '?')}",
        f"  status_url: {engine.get('status_url', 'unknown')}",
        f"  spiders:    {_spiders(engine)}",
        f"  since:      {_when(engine.get('since'))}",
        f"  last seen:  {_when(event.detail.get('last_seen', event.time))}",
    ]
    lines.extend(f"  {key}: {value}" for key, value in event.detail.items() if key != "last_seen")
    return "\n".join(lines)


def _message_id(events: Sequence[Event], sender: str) -> str:
    """The same ID for the same events, so that a retried message (the server took it,
    the answer was lost) is one message to mail servers, under the sender's domain."""
    facts = "\n".join(f"{e.seq} {e.type.value} {e.engine_id} {e.time!r}" for e in events)
    digest = hashlib.sha256(facts.encode()).hexdigest()[:32]
    domain = sender.rpartition("@")[2].strip("<> ") or "netdisco-monitor"
    return f"<{digest}@{domain}>"


class EmailHook:
    """E-mail through aiosmtplib; several events in one batching window make one message."""

    name = "email"
    batch = True

    def __init__(self, settings: EmailSettings) -> None:
        self.settings = settings
        self.events = settings.events

    def message(self, events: Sequence[Event]) -> EmailMessage:
        first = events[0]
        subject = f"{first.type.value}: {first.engine_id or first.engine.get('id', 'cluster')}"
        if len(events) > 1:
            subject = f"{len(events)} events: " + ", ".join(
                f"{e.type.value} {e.engine_id or ''}".strip() for e in events[:5]
            )
        msg = EmailMessage()
        msg["From"] = self.settings.sender
        msg["To"] = ", ".join(self.settings.to)
        msg["Subject"] = f"{self.settings.subject_prefix} {subject}".strip()
        msg["Date"] = email.utils.formatdate(localtime=True)
        msg["Message-ID"] = _message_id(events, self.settings.sender)
        shown = [describe(e) for e in events[:MAX_DESCRIBED]]
        if len(events) > MAX_DESCRIBED:  # a storm: the rest counted, the message bounded
            rest = Counter(e.type.value for e in events[MAX_DESCRIBED:])
            kinds = ", ".join(f"{n} {kind}" for kind, n in rest.most_common())
            shown.append(f"... and {len(events) - MAX_DESCRIBED} more events: {kinds}")
        msg.set_content("\n\n".join(shown) + "\n\n-- netdisco-monitor\n")
        return msg

    async def deliver(self, events: Sequence[Event]) -> None:
        s = self.settings
        await aiosmtplib.send(
            self.message(events),
            hostname=s.host,
            port=s.port,
            start_tls=s.starttls,
            use_tls=s.tls,
            username=s.username,
            password=s.password,
            timeout=30,
        )

    async def aclose(self) -> None:
        return None


class WebhookHook:
    """POST of the event JSON; any status other than 2xx is a failure (and is retried)."""

    name = "webhook"
    batch = False

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings
        self.events = settings.events
        self._session: aiohttp.ClientSession | None = None

    async def deliver(self, events: Sequence[Event]) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        for event in events:
            async with self._session.post(self.settings.url, json=event.to_json()) as resp:
                if resp.status // 100 != 2:
                    raise HookError("webhook", f"{self.settings.url} answered {resp.status}")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class CommandHook:
    """Runs a program with the event JSON on stdin; a non-zero exit is a failure.

    The program runs in its own process group (session), so whatever it forks can
    be found and killed: TERM on its timeout, KILL ``grace`` s later, both before
    the alerts' outer ``hook_timeout`` fires; KILL at once if the delivery is
    cancelled (monitor stopping); KILL for anything left behind after it exits.
    """

    name = "command"
    batch = False

    def __init__(self, settings: CommandSettings, outer_timeout: float | None = None) -> None:
        self.settings = settings
        self.events = settings.events
        self.term_at, self.grace = kill_schedule(settings.timeout, outer_timeout)

    async def deliver(self, events: Sequence[Event]) -> None:
        for event in events:
            await self._run(json.dumps(event.to_json()).encode())

    async def _run(self, payload: bytes) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self.settings.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: pgid == pid
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(payload), self.term_at)
        except TimeoutError:
            await stop_group(proc, self.grace)
            raise HookError("command", f"timed out after {self.term_at:g} s") from None
        except BaseException:  # cancelled: the outer timeout or the monitor stopping
            signal_group(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise
        finally:
            signal_group(proc.pid, signal.SIGKILL)  # no orphans, whatever happened
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace").strip()[-300:]
            raise HookError("command", f"exited with {proc.returncode}: {tail}")

    async def aclose(self) -> None:
        return None


def kill_schedule(timeout: float, outer: float | None) -> tuple[float, float]:
    """``(term_at, grace)``: when to TERM a command and how long before KILL, so that
    both happen before the outer timeout (which cancels without killing anything)."""
    if outer is None:
        return timeout, KILL_GRACE
    grace = min(KILL_GRACE, outer / 5)
    return min(timeout, outer - 2 * grace), grace


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to every process of group ``pgid``; False when none is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group id was reused by someone else's processes
        return False
    return True


async def stop_group(proc: asyncio.subprocess.Process, grace: float) -> None:
    """TERM the command's group, KILL it after ``grace`` s, and reap the command."""
    signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), grace)
    signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


def resolve(target: str) -> Callable[..., Any]:
    """``package.module:function`` (or the dotted form) to the function, or ConfigError."""
    module_name, sep, attr = target.partition(":")
    if not sep:
        module_name, _, attr = target.rpartition(".")
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("callable.target", f"cannot load {target!r}: {exc}") from exc
    if not callable(func):
        raise ConfigError("callable.target", f"{target!r} is not callable")
    return func  # type: ignore[no-any-return]


class CallableHook:
    """A user's Python function, sync or async, called with the event.

    A sync function runs on this hook's own threads (``HookThreads``), never on the
    loop's default executor, which the state file and the ZooKeeper client need.
    """

    name = "callable"
    batch = False

    def __init__(self, settings: CallableSettings) -> None:
        self.events = settings.events
        self.func = resolve(settings.target)
        self.threads = HookThreads(HOOK_THREADS)

    async def deliver(self, events: Sequence[Event]) -> None:
        for event in events:
            if inspect.iscoroutinefunction(self.func):
                await self.func(event)
            else:  # a thread, so a slow sync hook cannot block the watcher
                result = await self.threads.run(self.func, event)
                if inspect.isawaitable(result):
                    await result

    async def aclose(self) -> None:
        return None
