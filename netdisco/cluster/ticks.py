"""When a schedule ticks: a cron expression or an interval, as absolute instants.

A schedule is ``schedule = "0 */6 * * *"`` (cron, evaluated in UTC by croniter; a
sixth field is seconds) or ``every = "30m"`` (``s``, ``m``, ``h``, ``d``; a number is
seconds). Ticks are absolute instants, the same on every engine and every monitor:
a cron expression's, or the multiples of the interval since the Unix epoch, so
whoever computes a tick agrees on which tick is which. The engine's scheduled
spiders (``netdisco.engine.schedules``) and the monitor's schedules of jobs
(``monitor.schedules``) both keep time with this one arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from croniter import croniter

from netdisco.exceptions import ConfigError
from netdisco.values import parse_duration


@dataclass(frozen=True)
class Schedule:
    """When something runs: ``cron`` or ``every`` (seconds), exactly one of them."""

    cron: str | None = None
    every: float | None = None

    def next_run(self, after: float) -> float:
        """The first tick strictly after ``after`` (Unix seconds)."""
        if self.every is not None:
            return (math.floor(after / self.every) + 1) * self.every
        assert self.cron is not None
        return float(croniter(self.cron, after).get_next(float))

    def last_run(self, at: float) -> float:
        """The latest tick at or before ``at``: the one due now, when it is new."""
        if self.every is not None:
            return math.floor(at / self.every) * self.every
        assert self.cron is not None
        before = float(croniter(self.cron, at).get_prev(float))
        following = self.next_run(before)
        return following if following <= at else before

    def describe(self) -> dict[str, Any]:
        """What status answers and the znode show."""
        return {"schedule": self.cron, "every": self.every}


def parse_schedule(cron: Any, every: Any, *, key: str) -> Schedule | None:
    """A schedule from the ``schedule`` and ``every`` keys of ``key``; None without either.

    A cron expression that never fires (``0 0 30 2 *``) is refused here, not at its
    first tick."""
    every_key, cron_key = (f"{key}.every", f"{key}.schedule") if key else ("every", "schedule")
    if cron is not None and every is not None:
        raise ConfigError(every_key, "set schedule or every, not both")
    if every is not None:
        return Schedule(every=parse_duration(every_key, every))
    if cron is None:
        return None
    if not isinstance(cron, str) or len(cron) > 200 or not croniter.is_valid(cron):
        raise ConfigError(cron_key, f"not a cron expression: {str(cron)[:200]!r}")
    schedule = Schedule(cron=cron)
    try:
        schedule.next_run(0.0)
    except (ValueError, OverflowError):  # croniter's errors are ValueErrors
        raise ConfigError(cron_key, f"{cron!r} never fires") from None
    return schedule
