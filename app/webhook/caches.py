"""Memory the webhook keeps between requests: the grouping of each owner, and owners not seen yet."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from grouper import GroupingError, group_workload
from topology.groups import GroupTree
from topology.tree import TopologyTree


class TreeCache:
    """group_workload(owner, topologies) per owner, reused while the watch cache holds the very same
    owner object and the cluster the same topologies (both are replaced on change, never edited), so
    the pods of a 4,096-pod job do not each rebuild its tree. Invalid owners are remembered too."""

    def __init__(self, limit: int = 2048):
        self._entries: OrderedDict[tuple, tuple[Mapping, Mapping, list[GroupTree] | str]] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def trees(self, owner: Mapping, topologies: Mapping[str, TopologyTree]) -> list[GroupTree]:
        metadata = owner.get("metadata") or {}
        key = (owner.get("apiVersion"), owner.get("kind"), metadata.get("namespace"), metadata.get("name"))
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry[0] is not owner or entry[1] is not topologies:
            try:
                result: list[GroupTree] | str = group_workload(owner, topologies)
            except GroupingError as error:
                result = str(error)
            entry = (owner, topologies, result)
            with self._lock:
                self._entries[key] = entry
                self._entries.move_to_end(key)
                while len(self._entries) > self._limit:
                    self._entries.popitem(last=False)
        if isinstance(entry[2], str):
            raise GroupingError(entry[2])
        return entry[2]


class OwnerWaits:
    """When each owner was first missing from the cache: pods wait for the watch only so long."""

    def __init__(self, limit: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self._first_miss: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit
        self.clock = clock

    def waited(self, key: str, record: bool = True) -> float:
        """Seconds since `key` was first missed (0 the first time); `record=False` changes nothing."""
        now = self.clock()
        with self._lock:
            first = self._first_miss.get(key)
            if first is None and record:
                self._first_miss[key] = now
                while len(self._first_miss) > self._limit:
                    self._first_miss.popitem(last=False)
        return 0.0 if first is None else now - first

    def found(self, key: str) -> None:
        with self._lock:
            self._first_miss.pop(key, None)
