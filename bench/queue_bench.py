"""How long a queue can grow: N requests queued with ``state_dir`` or in the memory
frontier (spilled), in a child process (a benchmark, not a test).

Prints the child's peak RSS (VmHWM, after a 20,000-request warm-up and at the end), wall
and CPU seconds, and the state's bytes on disk per request. The child is the one
``tests/netdisco/test_disk_queue.py`` runs for its memory bounds.

    .venv/bin/python bench/queue_bench.py --count 10000000 --frontier state_dir
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.netdisco.test_disk_queue import MEMORY  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--frontier", choices=("state_dir", "memory"), default="state_dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="queue-bench-") as tmp:
        state = Path(tmp) / "state" if args.frontier == "state_dir" else None
        began = time.perf_counter()
        argv = [sys.executable, "-c", MEMORY, str(args.count), str(state or "")]
        out = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
        wall = time.perf_counter() - began
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        disk = sum(f.stat().st_size for f in state.iterdir()) if state else 0
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"{args.count:,} queued ({args.frontier}): peak RSS {result['peak']:.1f} MB "
        f"(after warm-up {result['warm']:.1f}), {wall:.0f} s wall, "
        f"{usage.ru_utime + usage.ru_stime:.0f} s CPU, "
        f"{disk / args.count:.0f} bytes/request on disk"
    )


if __name__ == "__main__":
    main()
