"""Logging set-up for entry points (library code only asks for loggers).

Readable, coloured lines on a terminal; one JSON object per line otherwise or
with ``json=True``. Context bound with contextvars (spider, url) appears on
every line.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, json: bool | None = None, level: str = "info") -> None:
    """Configure structlog once for this process."""
    as_json = (not sys.stderr.isatty()) if json is None else json
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info if as_json else structlog.dev.set_exc_info,
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
