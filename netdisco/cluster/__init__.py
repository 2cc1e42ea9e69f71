"""The cluster layer: what engines and monitors agree on in ZooKeeper.

``contract`` is the znode format, its states and paths, and the event names;
``membership`` the pure diff of two listings; ``tombstones`` the leave
transaction and how readers tell a leave from a crash; ``acl`` the one ACL
policy; ``legacy`` the old timing rule for engines without tombstones;
``settings`` the ``[zookeeper]`` table both sides read; ``zk`` the only bridge
between kazoo's threads and asyncio; ``registry`` an engine's self-healing
ephemeral node. Nothing here knows
about crawling: the engine and the monitor sit above it.
"""
