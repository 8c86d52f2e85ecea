"""The one cache of grouper answers, shared by the engine (under the state lock) and the webhook (on the
event loop, without it): a workload is grouped once for both, and always with the cluster's PriorityClasses.

- `trees(owner, topologies)`: group_workload's trees of a workload (or its GroupingError), reused while the
  watch cache holds the very same owner object, the cluster the same topologies (both are replaced on
  change, never edited) and the PriorityClasses are the same versions;
- `get(key, compute)`: any other answer by a key of versions (a pod's identity, a PodGroup's tree).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from grouper import GroupingError, group_workload
from grouper.kinds import WorkloadShape, workload_shape
from grouper.names import KAI_PODGROUP_ANNOTATION, KAI_SUBGROUP_LABEL, SP_PODGROUP_LABEL
from topology.groups import GroupTree
from topology.tree import TopologyTree

LIMIT = 4096


def version(obj: Mapping) -> tuple:
    """What identifies one version of an object (its labels, for objects without a resourceVersion)."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return (metadata.get("uid"), metadata.get("namespace"), metadata.get("name"), metadata.get("resourceVersion"),
            tuple(sorted(labels.items())) if not metadata.get("resourceVersion") else None)


def podgroup_member_key(pod: Mapping) -> tuple:
    """What a PodGroup's grouping reads of a member pod: its name and the labels and annotation that say
    which PodGroup and subgroup it joins, and its spec by generation (bumped on every spec change)."""
    metadata = pod.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    return (metadata.get("name") or "", metadata.get("uid"), metadata.get("generation"), labels.get(KAI_SUBGROUP_LABEL),
            labels.get(SP_PODGROUP_LABEL), annotations.get(KAI_PODGROUP_ANNOTATION))


class _Grouped:
    __slots__ = ("owner", "topologies", "classes", "trees", "error", "_shape")

    def __init__(self, owner: Mapping, topologies, classes: tuple, trees: list[GroupTree] | None,
                 error: GroupingError | None):
        self.owner, self.topologies, self.classes = owner, topologies, classes
        self.trees, self.error, self._shape = trees, error, None

    def shape(self) -> WorkloadShape:
        if self._shape is None:
            self._shape = workload_shape(self.owner)
        return self._shape


class IdentityCache:
    def __init__(self, priority_classes: Callable[[], Iterable[Mapping]] = tuple, limit: int = LIMIT):
        """`priority_classes`: the cluster's PriorityClass objects as the watch has them now."""
        self._priority_classes = priority_classes
        self._entries: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit

    def classes(self) -> tuple[list[Mapping], tuple]:
        """(the PriorityClasses, their versions): what a grouping's priority depends on."""
        classes = list(self._priority_classes())
        return classes, tuple(version(c) for c in classes)

    def trees(self, owner: Mapping, topologies: Mapping[str, TopologyTree]) -> list[GroupTree]:
        """group_workload(owner, topologies, PriorityClasses); raises its GroupingError (remembered too)."""
        return self.grouped(owner, topologies)[0]

    def grouped(self, owner: Mapping, topologies: Mapping[str, TopologyTree]) -> tuple[list[GroupTree], WorkloadShape]:
        """(the trees, the workload's shape) of `owner`; raises GroupingError for an invalid workload."""
        metadata = owner.get("metadata") or {}
        key = ("trees", owner.get("apiVersion"), owner.get("kind"), metadata.get("namespace"), metadata.get("name"))
        classes, versions = self.classes()
        with self._lock:
            entry = self._entries.get(key)
        if not (isinstance(entry, _Grouped) and entry.owner is owner and entry.topologies is topologies
                and entry.classes == versions):
            try:
                entry = _Grouped(owner, topologies, versions, group_workload(owner, topologies, classes), None)
            except GroupingError as error:
                entry = _Grouped(owner, topologies, versions, None, error)
            self._put(key, entry)
        if entry.trees is None:
            raise type(entry.error)(str(entry.error))      # its kind too (UnresolvedLevelError is warned)
        return entry.trees, entry.shape()

    def get(self, key: tuple, compute: Callable[[], object]):
        """The answer kept under `key`, else compute() kept (an exception is raised, not kept)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = compute()
        self._put(key, value)
        return value

    def _put(self, key: tuple, value: object) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
