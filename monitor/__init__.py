"""netdisco-monitor: watches engines under /netdiscovery and runs hooks on changes.

The data flow, one module per step (the import graph is the architecture):

1. ``config`` reads TOML, ``NETDISCO_MONITOR_*`` variables and flags into the frozen
   ``settings`` (each field checks its value and names the key of a bad one).
2. ``watcher`` owns the ZooKeeper session: one reconcile task, woken by watches,
   reconnects and a periodic resync, lists the root and reads the children.
3. ``snapshot`` turns two listings into changes with a pure diff (members are
   ``(name, czxid)``; the root's cversion counts the changes too fast to see).
4. ``events`` is the typed catalogue every consumer shares.
5. ``daemon`` logs, keeps and counts each event, then ``alerts`` applies the grace
   period, flap detection, batching and retries, and calls the ``hooks``.
6. ``http`` serves the view, the events, health, ``metrics`` and the dashboard.
7. ``cli`` is the entry point (``netdisco-monitor``, ``netdisco-monitor check``).
"""

__version__ = "0.1.0"
