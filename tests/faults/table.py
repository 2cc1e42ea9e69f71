"""The rows the fault scenarios report, and the table printed at the end of the run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    scenario: str
    runs: int
    expected: int  # events that had to be reported
    false: int  # events reported that did not happen (a leave read as a loss, ...)
    lost: int  # events that happened and were not reported
    seconds: float


ROWS: list[Row] = []


def render() -> str:
    head = ("scenario", "runs", "expected events", "false events", "lost events", "seconds")
    body = [
        (r.scenario, str(r.runs), str(r.expected), str(r.false), str(r.lost), f"{r.seconds:.1f}")
        for r in ROWS
    ]
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in
             [head, *body]]  # fmt: skip
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
