"""Runnable examples (a package, so tests and the monitor can import them as ``examples.*``)."""
