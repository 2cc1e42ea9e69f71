"""Hypothesis settings shared by the fuzz tests: a few examples in ``make test``,
many more in ``make fuzz`` (``NETDISCO_FUZZ_SCALE`` multiplies every count)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("NETDISCO_FUZZ_SCALE", "1")))


def examples(count: int) -> settings:
    """``count`` examples (times the scale), no per-example deadline (servers are real)."""
    return settings(
        max_examples=count * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=SCALE == 1,  # make test: the same examples every run
    )
