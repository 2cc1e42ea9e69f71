"""The suite. In a suite's run (``NDTEST_RUN``), every Python process of the venv writes its
pending asyncio tasks on SIGUSR1 for the hang witness (tests/taskdump.py, tests/hangs.py)."""
