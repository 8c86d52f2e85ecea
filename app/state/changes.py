"""Which nodes gained room, or gained pods, since a moment: what decides whether a refused gang's cached
answer may still be given (issue 14: a refusal holds until something that could change it changes).

Every event stamps its node with a new epoch; a Mark is (rebuilds, epoch) at one moment. Nodes added,
removed or re-labelled rebuild the cluster, which invalidates every mark.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Mark:
    rebuilds: int
    epoch: int


class NodeChanges:
    def __init__(self) -> None:
        self.epoch = 0
        self.rebuilds = 0
        self.freed = np.zeros(0, dtype=np.int64)      # per node: the epoch capacity was last freed there
        self.added = np.zeros(0, dtype=np.int64)      # per node: the epoch a pod last started there
        self.added_priority = np.zeros(0, dtype=np.int64)   # the lowest priority ever started there
        self.opened = 0                               # the epoch a node last turned Ready, uncordoned, untainted

    def reset(self, node_count: int) -> None:
        """The cluster was rebuilt (nodes added, removed, re-labelled): every mark is stale."""
        self.rebuilds += 1
        self.epoch += 1
        self.freed = np.zeros(node_count, dtype=np.int64)
        self.added = np.zeros(node_count, dtype=np.int64)
        self.added_priority = np.full(node_count, np.iinfo(np.int64).max, dtype=np.int64)

    def note_freed(self, node: int | None) -> None:
        if node is not None and 0 <= node < len(self.freed):
            self.epoch += 1
            self.freed[node] = self.epoch

    def note_opened(self, node: int | None) -> None:
        """A node turned Ready, uncordoned or lost a taint: pods it refused before may now use it."""
        if node is not None and 0 <= node < len(self.freed):
            self.note_freed(node)
            self.opened = self.epoch

    def note_added(self, node: int | None, priority: int = 0) -> None:
        if node is not None and 0 <= node < len(self.added):
            self.epoch += 1
            self.added[node] = self.epoch
            self.added_priority[node] = min(int(self.added_priority[node]), priority)

    def mark(self) -> Mark:
        return Mark(self.rebuilds, self.epoch)

    def freed_since(self, mark: Mark, nodes: np.ndarray) -> bool:
        """Room appeared on one of `nodes` (a bool mask), or the cluster was rebuilt, after `mark`."""
        if mark.rebuilds != self.rebuilds or len(nodes) != len(self.freed):
            return True
        return bool((self.freed[nodes] > mark.epoch).any())

    def opened_since(self, mark: Mark) -> bool:
        """A node opened up anywhere (or the cluster was rebuilt) after `mark`."""
        return mark.rebuilds != self.rebuilds or self.opened > mark.epoch

    def freed_nodes(self, mark: Mark, nodes: np.ndarray) -> np.ndarray:
        """Indices of `nodes` (a bool mask) where room appeared after `mark`."""
        return np.flatnonzero(nodes & (self.freed > mark.epoch))

    def victims_since(self, mark: Mark, nodes: np.ndarray, priority: int) -> bool:
        """A pod of a priority below `priority` may have started on one of `nodes` after `mark` (a new
        possible victim; conservative: the lowest priority a node ever saw counts)."""
        if mark.rebuilds != self.rebuilds or len(nodes) != len(self.added):
            return True
        recent = nodes & (self.added > mark.epoch)
        return bool((self.added_priority[recent] < priority).any())
