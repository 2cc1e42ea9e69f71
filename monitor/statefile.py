"""The last reported view on disk, so a restarted monitor reports only real changes.

Written atomically (temporary file, then ``os.replace``): a crash mid-write
leaves the previous file, never half of one. A file for another cluster or
root is ignored with a log line rather than diffed into false events.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import structlog

from netdisco.cluster.membership import View, view_from_json, view_to_json

log = structlog.get_logger(__name__)

FORMAT = 1


def load(path: Path, *, hosts: str, root: str) -> View | None:
    """The persisted view, or ``None`` (absent, unreadable, or another cluster's)."""
    try:
        raw: Any = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("state_file_unreadable", path=str(path), error=str(exc))
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        log.warning("state_file_ignored", path=str(path), reason="unknown format")
        return None
    if raw.get("hosts") != hosts or raw.get("root") != root:
        log.warning("state_file_ignored", path=str(path), reason="another cluster or root")
        return None
    try:
        return view_from_json(raw["view"])
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("state_file_ignored", path=str(path), reason=f"bad content: {exc!r}")
        return None


def save(path: Path, view: View, *, hosts: str, root: str) -> None:
    """Replace the file with ``view`` in one atomic step."""
    payload = {"format": FORMAT, "hosts": hosts, "root": root, "view": view_to_json(view)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, separators=(",", ":")), "utf-8")
    os.replace(tmp, path)
