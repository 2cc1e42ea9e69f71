"""netdisco-monitor: watches engines under /netdiscovery and runs hooks on changes."""

__version__ = "0.1.0"
