"""Vectorized per-node and per-domain questions the planner asks of a topology and a free matrix."""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .tree import TopologyTree

# "Any number of pods" for a request of nothing: small enough that summing it over a million nodes
# (sum_by_level, segments_by_level) stays far from int64 overflow, large enough to never be reached.
UNBOUNDED = np.iinfo(np.int64).max >> 20


def pods_per_node(free: np.ndarray, request: np.ndarray, usable: np.ndarray | None = None) -> np.ndarray:
    """How many pods of `request` fit on each node: min over requested resources of free // request."""
    columns = np.flatnonzero(request > 0)
    if columns.size == 0:
        fit = np.full(free.shape[0], UNBOUNDED, dtype=np.int64)
    else:
        fit = (np.maximum(free[:, columns], 0) // request[columns]).min(axis=1)
    if usable is not None:
        fit = np.where(usable, fit, 0)
    return fit


def sum_by_level(tree: TopologyTree, per_node: np.ndarray) -> list[np.ndarray]:
    """Per-node values summed into every domain, one array per level (non-members count nothing).
    Sums are exact int64 (no float rounding, so byte counts of large clusters stay right)."""
    plan = _sum_plan(tree)
    finest = tree.depth - 1
    sums: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * tree.depth
    sums[finest] = _reduce(np.asarray(per_node, dtype=np.int64)[plan.members_by_domain], plan.node_starts)
    for level in range(finest, 0, -1):
        sums[level - 1] = _reduce(sums[level][plan.children_by_parent[level]], plan.child_starts[level])
    return sums


def segments_by_level(tree: TopologyTree, per_node: np.ndarray, segment_level: int,
                      segment_size: int) -> list[np.ndarray | None]:
    """Whole segments of `segment_size` pods that fit per domain: floor(pods / size) at the segment
    level, summed upward; levels finer than the segment level have None (a segment may not span them)."""
    if not 0 <= segment_level < tree.depth:
        raise ValueError(f"segment_level {segment_level} is not a level of topology {tree.name!r} "
                         f"(0..{tree.depth - 1})")
    if segment_size < 1:
        raise ValueError(f"segment_size must be at least 1, got {segment_size}")
    plan = _sum_plan(tree)
    pods = sum_by_level(tree, per_node)
    result: list[np.ndarray | None] = [None] * tree.depth
    result[segment_level] = pods[segment_level] // segment_size
    for level in range(segment_level, 0, -1):
        result[level - 1] = _reduce(result[level][plan.children_by_parent[level]], plan.child_starts[level])
    return result


@dataclass(frozen=True)
class _SumPlan:
    """Orders that put the members of each domain next to each other, so np.add.reduceat sums them."""

    members_by_domain: np.ndarray            # member nodes ordered by their finest domain
    node_starts: np.ndarray                  # where each finest domain starts in that order
    children_by_parent: list[np.ndarray]     # per level: its domains ordered by parent
    child_starts: list[np.ndarray]           # per level: where each parent's children start


_PLANS: "weakref.WeakKeyDictionary[TopologyTree, _SumPlan]" = weakref.WeakKeyDictionary()


def _sum_plan(tree: TopologyTree) -> _SumPlan:
    plan = _PLANS.get(tree)
    if plan is None:
        members = np.flatnonzero(tree.member)
        order, starts = _grouping(tree.node_domain[-1][members], tree.domain_count(tree.depth - 1))
        by_parent, child_starts = [np.empty(0, dtype=np.intp)], [np.empty(0, dtype=np.intp)]
        for level in range(1, tree.depth):
            level_order, level_starts = _grouping(tree.parent[level], tree.domain_count(level - 1))
            by_parent.append(level_order)
            child_starts.append(level_starts)
        plan = _PLANS[tree] = _SumPlan(members[order], starts, by_parent, child_starts)
    return plan


def _grouping(index: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """A stable order of `index` and the start of each of the `length` groups (every group is non-empty
    in a tree: a domain exists only because some member node lies inside it)."""
    order = np.argsort(index, kind="stable")
    starts = np.searchsorted(index[order], np.arange(length))
    return order, starts


def _reduce(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(values, starts)


def hop_distances(tree: TopologyTree, level: int, index: int) -> np.ndarray:
    """Tree edges from a domain (level < depth) or a node (level == depth) to every node; -1 for nodes
    outside the topology. Two nodes in one rack are 2 apart; a rack is 1 from its own nodes."""
    depth = tree.depth
    if level == depth:
        if not tree.member[index]:
            return np.full(len(tree.member), -1, dtype=np.int32)
        ancestors = [int(tree.node_domain[l][index]) for l in range(depth)]
    else:
        ancestors = [tree.ancestor(level, index, l) for l in range(level + 1)]
    shared = np.zeros(len(tree.member), dtype=np.int32)
    for l, ancestor in enumerate(ancestors):
        shared += tree.node_domain[l] == ancestor
    lowest_common = shared - 1                        # -1 is the virtual root above level 0
    distance = (depth - lowest_common) + (level - lowest_common)
    if level == depth:
        distance[index] = 0
    return np.where(tree.member, distance, -1).astype(np.int32)


def hop_distance(tree: TopologyTree, a: tuple[int, int], b: tuple[int, int]) -> int:
    """Edges between two places, each (level, index) with level == depth meaning a node; -1 when two
    different places include a node outside the topology (as in hop_distances); a place is 0 from itself."""
    if a == b:
        return 0
    if any(level == tree.depth and not tree.member[index] for level, index in (a, b)):
        return -1
    path_a, path_b = _ancestry(tree, *a), _ancestry(tree, *b)
    shared = 0
    for x, y in zip(path_a, path_b):
        if x != y:
            break
        shared += 1
    return (len(path_a) - shared) + (len(path_b) - shared)


def _ancestry(tree: TopologyTree, level: int, index: int) -> list[int]:
    """Domain indexes from level 0 down to the place itself (a node ends with ('node', index))."""
    if level == tree.depth:
        return [int(tree.node_domain[l][index]) for l in range(tree.depth)] + [-(index + 1)]
    return [tree.ancestor(level, index, l) for l in range(level + 1)]
