"""Vectorized per-node and per-domain questions the planner asks of a topology and a free matrix."""
from __future__ import annotations

import numpy as np

from .tree import TopologyTree

UNBOUNDED = np.iinfo(np.int64).max // 4


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
    """Per-node values summed into every domain, one array per level (non-members count nothing)."""
    finest = tree.depth - 1
    members = tree.member
    sums: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * tree.depth
    sums[finest] = _bincount(tree.node_domain[finest][members], per_node[members], tree.domain_count(finest))
    for level in range(finest, 0, -1):
        sums[level - 1] = _bincount(tree.parent[level], sums[level], tree.domain_count(level - 1))
    return sums


def segments_by_level(tree: TopologyTree, per_node: np.ndarray, segment_level: int,
                      segment_size: int) -> list[np.ndarray | None]:
    """Whole segments of `segment_size` pods that fit per domain: floor(pods / size) at the segment
    level, summed upward; levels finer than the segment level have None (a segment may not span them)."""
    pods = sum_by_level(tree, per_node)
    result: list[np.ndarray | None] = [None] * tree.depth
    result[segment_level] = pods[segment_level] // segment_size
    for level in range(segment_level, 0, -1):
        result[level - 1] = _bincount(tree.parent[level], result[level], tree.domain_count(level - 1))
    return result


def _bincount(index: np.ndarray, weights: np.ndarray, length: int) -> np.ndarray:
    if index.size == 0:
        return np.zeros(length, dtype=np.int64)
    return np.bincount(index, weights=weights.astype(np.float64), minlength=length).astype(np.int64)


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
    """Edges between two places, each (level, index) with level == depth meaning a node."""
    if a == b:
        return 0
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
