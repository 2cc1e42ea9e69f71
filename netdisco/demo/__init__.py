"""``netdisco demo``: a live cluster on loopback in about half a minute, told as it happens.

``story`` runs it (ZooKeeper, website, SMTP sink, monitor, three engines, a
graceful leave, a crash and the alert e-mail), ``site`` is what the engines
crawl and where the e-mail lands, ``support`` starts and stops the child
processes by pid and follows the monitor's events.
"""

from netdisco.demo.site import serve_site
from netdisco.demo.story import run

__all__ = ["run", "serve_site"]
