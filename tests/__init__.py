"""The suite. A process of a suite's run (``NDTEST_RUN``, set by ``make unit``) that imports it
(pytest's workers, and the children that run a module of it: ``python -m tests...``) writes
its pending asyncio tasks on SIGUSR1 for the hang witness (tests/hangs.py)."""

import os

if os.environ.get("NDTEST_RUN"):
    from tests.hangs import install_task_dump

    install_task_dump()
