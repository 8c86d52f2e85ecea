"""The planner's view of a topology: levels 0..depth-1 (coarsest first), nodes as level `depth`, and a
virtual root (the whole cluster) as level -1. A gang without a topology has depth 0: root and nodes."""
from __future__ import annotations

import weakref

import numpy as np

from ..tree import TopologyTree

ROOT = -1


class Layout:
    def __init__(self, tree: TopologyTree | None, node_count: int):
        self.tree = tree
        self.depth = tree.depth if tree is not None else 0
        self.node_count = node_count
        self.member = tree.member.copy() if tree is not None else np.ones(node_count, dtype=bool)
        nodes = np.arange(node_count, dtype=np.int64)
        levels = [np.asarray(tree.node_domain[level], dtype=np.int64) for level in range(self.depth)] \
            if tree is not None else []
        self.node_domain: list[np.ndarray] = levels + [nodes]       # index by level 0..depth
        # each node's rank in tree order (domain by domain, coarsest level first): pods fill nodes in it
        self.position = np.empty(node_count, dtype=np.int64)
        self.position[np.lexsort([nodes] + [levels[i] for i in range(len(levels) - 1, -1, -1)])] = nodes
        self._ancestors: dict[tuple[int, int], np.ndarray] = {}
        self._groups: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    # --- sizes and names ---------------------------------------------------------------------------
    def size(self, level: int) -> int:
        if level == ROOT:
            return 1
        if level == self.depth:
            return self.node_count
        return self.tree.domain_count(level)

    def level_name(self, level: int) -> str:
        if level == ROOT:
            return "cluster"
        if level == self.depth:
            return "node"
        return self.tree.levels[level].display

    def level_plural(self, level: int) -> str:
        name = self.level_name(level)
        return f"{name} domains" if "/" in name or "." in name else f"{name}s"

    def domain_id(self, level: int, domain: int) -> str:
        if level == ROOT:
            return "cluster"
        if level == self.depth:
            return self.tree.node_names[domain] if self.tree is not None else str(domain)
        return self.tree.domain_ids[level][domain]

    def domain_value(self, level: int, domain: int) -> str:
        return self.domain_id(level, domain).rsplit("/", 1)[-1]

    def level_of(self, name: str) -> int:
        return self.tree.level_index(name)

    # --- structure ---------------------------------------------------------------------------------
    def ancestors(self, level: int, at: int) -> np.ndarray:
        """For every unit of `level` (a domain, or a node when level == depth), its domain at `at`
        (coarser or equal); -1 for nodes outside the topology."""
        key = (level, at)
        found = self._ancestors.get(key)
        if found is not None:
            return found
        if at == ROOT:
            result = np.zeros(self.size(level), dtype=np.int64)
            if level == self.depth:
                result[~self.member] = -1
        elif at == level:
            result = np.arange(self.size(level), dtype=np.int64)
        elif level == self.depth:
            result = self.node_domain[at]
        else:
            result = np.arange(self.size(level), dtype=np.int64)
            for step in range(level, at, -1):
                result = np.asarray(self.tree.parent[step], dtype=np.int64)[result]
        self._ancestors[key] = result
        return result

    def inside(self, at: int, domain: int, level: int) -> np.ndarray:
        """Units of `level` inside `domain` of level `at`, in index (tree) order."""
        order, bounds = self._grouped(level, at)
        return order[bounds[domain]:bounds[domain + 1]]

    def inside_any(self, at: int, domains: np.ndarray, level: int) -> np.ndarray:
        """Units of `level` inside any of `domains` (distinct) of level `at`, in index order."""
        order, bounds = self._grouped(level, at)
        starts, lengths = bounds[domains], bounds[domains + 1] - bounds[domains]
        offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        return np.sort(order[offsets + np.arange(int(lengths.sum()))])

    def _grouped(self, level: int, at: int) -> tuple[np.ndarray, np.ndarray]:
        key = (level, at)
        grouped = self._groups.get(key)
        if grouped is None:
            owner = self.ancestors(level, at)
            order = np.argsort(owner, kind="stable")
            bounds = np.searchsorted(owner[order], np.arange(self.size(at) + 1))
            grouped = self._groups[key] = (order, bounds)
        return grouped

    def node_ancestor(self, nodes: np.ndarray, at: int) -> np.ndarray:
        return self.ancestors(self.depth, at)[nodes]


_LAYOUTS: weakref.WeakKeyDictionary[TopologyTree, Layout] = weakref.WeakKeyDictionary()
_FLAT: dict[int, Layout] = {}


def layout_for(tree: TopologyTree | None, node_count: int) -> Layout:
    """A cached Layout: the groupings are computed once per topology snapshot, not once per plan."""
    if tree is None:
        layout = _FLAT.get(node_count)
        if layout is None:
            if len(_FLAT) > 16:
                _FLAT.clear()
            layout = _FLAT[node_count] = Layout(None, node_count)
        return layout
    layout = _LAYOUTS.get(tree)
    if layout is None or layout.node_count != node_count:
        layout = _LAYOUTS[tree] = Layout(tree, node_count)
    return layout
