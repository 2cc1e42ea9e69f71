"""Logging set-up for entry points (library code only asks for loggers).

Readable, coloured lines on a terminal; one JSON object per line otherwise or
with ``json=True``. Context bound with contextvars (spider, url) appears on
every line. Standard-library loggers (kazoo, aiohttp) go through the same
renderer, warnings and above only; kazoo's reconnect chatter is kept to errors
because the registry and the monitor log connection states themselves.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, json: bool | None = None, level: str = "info") -> bool:
    """Configure structlog, and the stdlib loggers under it, once for this process;
    returns whether lines are JSON (``json``, or stderr is not a terminal)."""
    as_json = (not sys.stderr.isatty()) if json is None else json
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    exc_info = structlog.processors.format_exc_info if as_json else structlog.dev.set_exc_info
    structlog.configure(
        processors=[*shared, exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.basicConfig(handlers=[handler], level=logging.WARNING, force=True)
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    return as_json
