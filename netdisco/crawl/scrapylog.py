"""Scrapy's log settings on the command line: ``LOG_LEVEL``, ``LOG_FILE`` and
``LOG_ENABLED`` from settings.py, a spider's ``custom_settings`` and ``-s``, as
``scrapy crawl`` reads them, under ``-L``/``--loglevel``/``--nolog``/``--log-level``.

The log belongs to the process, not to one crawl, so these names never reach the crawl
settings (which refuse them elsewhere, saying so): the command line takes them out of
each layer and configures the log from the winner, the command line's own flags first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from netdisco.exceptions import ConfigError
from netdisco.values import parse_bool

#: Scrapy's settings that only the log reads
LOG_NAMES = ("LOG_ENABLED", "LOG_FILE", "LOG_LEVEL")
#: the levels ``--log-level`` (and Scrapy's ``-L``, any case) takes; ``none`` is ``--nolog``
LEVELS = ("debug", "info", "warning", "error", "critical")


def without_log(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with Scrapy's log settings taken out (they configure the log instead)."""
    return {name: value for name, value in values.items() if name not in LOG_NAMES}


def log_choice(
    given: str | None, layers: Mapping[str, Mapping[str, Any]]
) -> tuple[str, str | None]:
    """(the level, the log file or None) from the command line's ``given`` level or, when
    it gave none, from ``layers`` (how each is named in errors -> its values, lowest
    priority first: settings.py, custom_settings, -s)."""
    level, file, enabled = "info", None, True
    for where, values in layers.items():
        if "LOG_LEVEL" in values:
            level = _level(where.format(key="LOG_LEVEL"), values["LOG_LEVEL"])
        if values.get("LOG_FILE"):
            file = str(values["LOG_FILE"])
        if "LOG_ENABLED" in values:
            enabled = parse_bool(where.format(key="LOG_ENABLED"), values["LOG_ENABLED"])
    if given is not None:
        return given, file
    return (level if enabled else "none"), file


def _level(key: str, value: Any) -> str:
    """Scrapy's level: a name in any case (``WARNING``), or its number (30)."""
    name = logging.getLevelName(value) if isinstance(value, int) else str(value)
    if name.lower() not in LEVELS:
        names = ", ".join(level.upper() for level in LEVELS)
        raise ConfigError(key, f"expected one of {names}, got {value!r}")
    return name.lower()
