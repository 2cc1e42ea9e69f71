"""Logging set-up for entry points (library code only asks for loggers).

Readable, coloured lines on a terminal; one JSON object per line otherwise or
with ``json=True``. Context bound with contextvars (spider, url) appears on
every line. Standard-library loggers (kazoo, aiohttp) go through the same
renderer, warnings and above only; kazoo's reconnect chatter is kept to errors
because the registry and the monitor log connection states themselves. asyncio's
errors are let through once per kind every 10 s (:class:`Repeats`): a server out
of descriptors logs each failed ``accept()``. Lines go to whatever ``sys.stderr`` is
when they are written (:class:`Stderr`), so a live display that takes stderr over
(``netdisco.progress``) prints them above itself.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import Any, TextIO

import structlog


class Repeats(logging.Filter):
    """Lets one record of a kind through per ``every`` seconds; the next says how many
    were held back. asyncio logs each failed ``accept()`` (out of descriptors: millions of
    lines a minute), which would fill the disk on top of the outage."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self.every = every
        self._last: dict[tuple[str, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = time.monotonic()
        last, held = self._last.get(key, (-math.inf, 0))
        if now - last < self.every:
            self._last[key] = (last, held + 1)
            return False
        if len(self._last) > 1000:  # bounded: old kinds are forgotten
            self._last.clear()
        self._last[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self.every:g} s)"
        return True


class Stderr:
    """The standard error of the moment: a stream looked up on every write, not when
    logging was set up, so that lines follow ``sys.stderr`` when it is replaced."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


#: loggers keep the configuration of their first use (fast); a process that configures
#: logging again and again in one run (a test suite calling ``main``) turns it off, or
#: ``structlog.testing.capture_logs`` no longer sees what a logger used before says
CACHE_LOGGERS = True


class Discard(Stderr):
    """Where ``--nolog``'s lines go: nowhere."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class LogFile:
    """The file log lines go to instead of stderr (Scrapy's ``LOG_FILE``): appended to,
    a line at a time; the one open file is closed when logging is configured again."""

    current: TextIO | None = None

    @classmethod
    def open(cls, path: str | None) -> TextIO | None:
        if cls.current is not None:
            cls.current.close()
        cls.current = None
        if path is not None:  # kept open for the process, as stderr is
            cls.current = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        return cls.current


def output() -> TextIO:
    """Where log lines go now: the log file, or the standard error of the moment (a
    worker's relayed lines follow them)."""
    return LogFile.current or sys.stderr


def configure(
    *, json: bool | None = None, level: str = "info", locals: bool = False,
    file: str | None = None,
) -> bool:  # fmt: skip
    """Configure structlog, and the stdlib loggers under it, once for this process;
    returns whether lines are JSON (``json``, or stderr is not a terminal; a ``file``'s
    are JSON unless ``json`` is False). Tracebacks show local variables only with
    ``locals`` (they may hold secrets, and they are long). ``level`` ``none`` logs
    nothing (``--nolog``)."""
    quiet = level == "none"  # --nolog: the critical lines too are dropped
    target: TextIO | Stderr = Discard() if quiet else (LogFile.open(file) or Stderr())
    as_json = (file is not None or not sys.stderr.isatty()) if json is None else json
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(exception_formatter=_tracebacks(locals))
    )
    exc_info = structlog.processors.format_exc_info if as_json else structlog.dev.set_exc_info
    structlog.configure(
        processors=[*shared, exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.CRITICAL if quiet else _number(level)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=target),  # type: ignore[arg-type]
        cache_logger_on_first_use=CACHE_LOGGERS,
    )
    _stdlib(target, shared, renderer, logging.CRITICAL + 10 if quiet else _number(level))
    return as_json


def _stdlib(
    target: TextIO | Stderr,
    shared: list[structlog.typing.Processor],
    renderer: structlog.typing.Processor,
    level: int,
) -> None:
    """The standard library's loggers through the same renderer, warnings and above (or
    ``level``, when higher); kazoo's kept to errors, asyncio's repeats held back."""
    handler = logging.StreamHandler(target)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.basicConfig(handlers=[handler], level=max(logging.WARNING, level), force=True)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    asyncio_logger = logging.getLogger("asyncio")
    if not any(isinstance(f, Repeats) for f in asyncio_logger.filters):
        asyncio_logger.addFilter(Repeats())


def _number(level: str) -> int:
    return logging.getLevelNamesMapping()[level.upper()]


def _tracebacks(locals: bool) -> structlog.typing.ExceptionRenderer:
    """Rich's tracebacks when Rich is installed (its locals only when asked), else plain."""
    try:
        import rich  # noqa: F401 - only whether it is there
    except ImportError:
        return structlog.dev.plain_traceback
    return structlog.dev.RichTracebackFormatter(show_locals=locals)


def fold_kazoo() -> None:
    """kazoo logs every failed reconnect (50 lines in 20 s of an outage): one line per
    kind every 10 s, the next saying how many were held back (``Repeats``)."""
    for name in ("kazoo.client", "kazoo.protocol.connection"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, Repeats) for f in logger.filters):
            logger.addFilter(Repeats())


def _host_configured() -> bool:
    """Whether the application set up stdlib logging (a test runner's capture does not count)."""
    handlers = logging.getLogger().handlers
    return any(not type(h).__module__.startswith("_pytest") for h in handlers)


def _message(_logger: object, _name: str, event: structlog.typing.EventDict) -> Any:
    """The event as one stdlib record: ``event key=value ...``, ``exc_info`` kept for the
    host's formatter (which prints a traceback without locals)."""
    kwargs = {k: event.pop(k) for k in ("exc_info", "stack_info") if k in event}
    if kwargs.get("exc_info") is True:
        kwargs["exc_info"] = sys.exc_info()
    name = event.pop("event", "")
    fields = " ".join(f"{key}={value!r}" if isinstance(value, str) and " " in value
                      else f"{key}={value}" for key, value in event.items())  # fmt: skip
    return {"msg": f"{name} {fields}".rstrip(), **kwargs}


def as_library() -> bool:
    """An engine inside an application that configured stdlib logging and not structlog:
    netdisco's lines go through stdlib logging (``netdisco.*`` loggers), so the host's
    handlers, levels and formats decide what is shown and where. True when set so."""
    fold_kazoo()
    if structlog.is_configured() or not _host_configured():
        return False
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.filter_by_level,
            _message,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    return True
