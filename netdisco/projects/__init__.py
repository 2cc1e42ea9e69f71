"""Projects: spiders deployed as versioned archives, installed into their own venvs.

The monitor checks and stores archives (:mod:`.archive`, :mod:`.store`: ZooKeeper
only, under ``<root>.projects``); an engine installs a version into a virtual
environment of its own (:func:`install`), reading ZooKeeper only. See docs/projects.md.
"""

from __future__ import annotations

from netdisco.projects.install import InstalledProject, collect_garbage, install

__all__ = ["InstalledProject", "collect_garbage", "install"]
