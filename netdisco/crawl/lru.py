"""A bounded mapping for per-host state: a crawl meets millions of hosts, memory must not.

Least recently used entries go first; an entry still in use (``evictable`` says
no) is kept and the next oldest goes instead, so a bound never breaks a rule
such as a host's politeness delay that is still running.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``size`` entries (more only while every older one is in use)."""

    def __init__(self, size: int, evictable: Callable[[V], bool] | None = None) -> None:
        self.size = size
        self._evictable = evictable
        self._data: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """The value for ``key`` without touching its place in the order."""
        return self._data.get(key)

    def put(self, key: K, value: V) -> V:
        """Store ``value`` as the most recently used, evict what is over the bound."""
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.size:
            self._trim()
        return value

    def pop(self, key: K) -> V | None:
        return self._data.pop(key, None)

    def _trim(self) -> None:
        """Drop the oldest evictable entries; each entry in use is looked at once."""
        for _ in range(len(self._data)):
            if len(self._data) <= self.size:
                return
            key, value = next(iter(self._data.items()))
            if self._evictable is None or self._evictable(value):
                del self._data[key]
            else:
                self._data.move_to_end(key)
