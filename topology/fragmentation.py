"""Fragmentation: how much of a topology is free in whole units, and the largest gang that fits now.

Free share says little about what a big gang can get: 78,574 free GPUs spread over every node hold no
whole rack. This module answers, per topology and level:

- whole free nodes and domains: a node is *whole free* when it is usable (Ready, schedulable, untainted
  apart from extended resources) and none of its unit resource (nvidia.com/gpu, else cpu) is used or
  reserved; a domain is whole free when every unit node in it is (nodes without the resource are not
  units: a CPU-only node in a GPU rack neither makes nor breaks it);
- the largest gang of a pod shape (e.g. 8 GPUs, a whole node) that fits now when the gang must stay in
  one domain of a level: the most pods of that shape any one domain holds (level `cluster`: no
  required level); and the same with given capacity handed back (every pod below a priority gone).

Pure numpy over the capacity matrices; one `sum_by_level` per figure, so a 16k-node cluster costs a few
milliseconds.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .counts import pods_per_node, sum_by_level
from .quantity import QuantityError, format_units, resource_units
from .tree import HOSTNAME_LABEL, TopologyTree

GPU = "nvidia.com/gpu"
CLUSTER = "cluster"


class ShapeError(ValueError):
    """A pod shape that cannot be read (names the text and the valid form)."""


@dataclass(frozen=True)
class Shape:
    """One pod's request, as `nvidia.com/gpu=8` or `cpu=4,memory=16Gi`."""

    name: str
    request: dict[str, int]

    def vector(self, resources: Sequence[str]) -> np.ndarray:
        return np.asarray([self.request.get(r, 0) for r in resources], dtype=np.int64)


def parse_shape(text: str, resources: Sequence[str] = ()) -> Shape:
    """`nvidia.com/gpu=8` (several `resource=quantity` joined by commas). With `resources` given, a
    resource no node offers is an error naming the valid ones."""
    request: dict[str, int] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, equals, quantity = part.partition("=")
        name = name.strip()
        if not equals or not name or not quantity.strip():
            raise ShapeError(f"shape {text!r}: expected resource=quantity[,resource=quantity], "
                             f"e.g. nvidia.com/gpu=8 or cpu=4,memory=16Gi")
        if resources and name not in resources:
            raise ShapeError(f"shape {text!r}: resource {name!r} is offered by no node; valid: {', '.join(resources)}")
        try:
            units = resource_units(name, quantity.strip())
        except (QuantityError, ValueError) as err:
            raise ShapeError(f"shape {text!r}: {err}") from None
        if units <= 0:
            raise ShapeError(f"shape {text!r}: {name} must be positive")
        request[name] = units
    if not request:
        raise ShapeError(f"shape {text!r}: expected resource=quantity, e.g. nvidia.com/gpu=8")
    return Shape(_shape_name(request), request)


def _shape_name(request: Mapping[str, int]) -> str:
    return ",".join(f"{name}={format_units(name, units)}" for name, units in request.items())


def unit_resource(resources: Sequence[str]) -> str:
    """What a node's "whole" is counted in: GPUs where nodes have them, else cpu."""
    return GPU if GPU in resources else "cpu"


def default_shapes(resources: Sequence[str], allocatable: np.ndarray, member: np.ndarray | None = None
                   ) -> list[Shape]:
    """One unit of the unit resource, and a whole node of it (the most common node size)."""
    unit = unit_resource(resources)
    if unit not in resources:
        return []
    column = allocatable[:, list(resources).index(unit)]
    if member is not None:
        column = column[member]
    column = column[column > 0]
    one = 1000 if unit == "cpu" else 1
    shapes = [Shape(_shape_name({unit: one}), {unit: one})]
    if column.size:
        values, counts = np.unique(column, return_counts=True)
        whole = int(values[np.argmax(counts)])
        if unit == "cpu":
            whole -= whole % 1000           # whole cores: a DaemonSet's few millicores aside
        if whole > one:
            shapes.append(Shape(_shape_name({unit: whole}), {unit: whole}))
    return shapes


@dataclass
class LevelMeasure:
    level: str                   # its display name; "node" for the nodes
    domains: int                 # domains (nodes) of the level holding unit nodes
    whole_free: int              # of them entirely free
    free_nodes: np.ndarray       # per domain: whole free nodes in it (node level: 0/1)
    unit_nodes: np.ndarray       # per domain: unit nodes in it
    free_children: np.ndarray | None   # per domain: whole free children (None at the node level)


@dataclass
class Largest:
    shape: str
    level: str                   # a level's display name, or "cluster"
    pods: int                    # the most pods of the shape one domain of the level holds now
    domain: str | None           # that domain's id (None for the cluster, or when nothing fits)
    pods_reclaimed: int | None = None      # the same with the reclaimable capacity handed back
    domain_reclaimed: str | None = None


@dataclass
class TreeMeasure:
    topology: str
    resource: str
    levels: list[LevelMeasure]   # coarsest first, then the nodes
    largest: list[Largest]
    below_priority: int | None = None

    def to_json(self, tree: TopologyTree, per_domain: bool = True) -> dict:
        levels = []
        for index, level in enumerate(self.levels):
            entry = {"level": level.level, "domains": level.domains, "whole_free": level.whole_free}
            if per_domain and index < tree.depth:
                entry["per_domain"] = [
                    {"id": tree.domain_ids[index][d], "whole_free_nodes": int(level.free_nodes[d]),
                     "unit_nodes": int(level.unit_nodes[d]),
                     "whole_free_children": int(level.free_children[d])}
                    for d in range(tree.domain_count(index))]
            levels.append(entry)
        largest = []
        for item in self.largest:
            entry = {"shape": item.shape, "level": item.level, "pods": item.pods, "domain": item.domain}
            if self.below_priority is not None:
                entry.update({"pods_if_lower_gone": item.pods_reclaimed, "domain_if_lower_gone": item.domain_reclaimed})
            largest.append(entry)
        body = {"resource": self.resource, "levels": levels, "largest": largest}
        if self.below_priority is not None:
            body["below_priority"] = self.below_priority
        return body


def whole_free_nodes(allocatable: np.ndarray, free: np.ndarray, usable: np.ndarray, column: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(unit nodes: those with some of the unit resource, whole free nodes among them)."""
    units = allocatable[:, column] > 0
    return units, units & usable & (free[:, column] >= allocatable[:, column])


def measure(tree: TopologyTree, resources: Sequence[str], allocatable: np.ndarray, free: np.ndarray,
            usable: np.ndarray, shapes: Sequence[Shape] = (), reclaimable: np.ndarray | None = None,
            below_priority: int | None = None) -> TreeMeasure:
    """Whole free nodes and domains per level, and the largest gang of each shape per level.

    `free`: the free matrix (used and reserved taken off); `usable`: nodes a pod may land on;
    `reclaimable`: per node, capacity that would come back (the pods below `below_priority`)."""
    resources = list(resources)
    unit = unit_resource(resources)
    if unit not in resources:
        return TreeMeasure(tree.name, unit, [], [], below_priority)
    column = resources.index(unit)
    member = tree.member
    units, whole = whole_free_nodes(allocatable, free, usable, column)
    units, whole = units & member, whole & member
    unit_counts = sum_by_level(tree, units)
    free_counts = sum_by_level(tree, whole)
    levels = []
    for level in range(tree.depth):
        holds = unit_counts[level] > 0
        is_free = holds & (free_counts[level] == unit_counts[level])
        if level + 1 < tree.depth:
            child_free = (unit_counts[level + 1] > 0) & (free_counts[level + 1] == unit_counts[level + 1])
            children = np.bincount(tree.parent[level + 1], weights=child_free,
                                   minlength=tree.domain_count(level)).astype(np.int64)
        else:
            children = free_counts[level]
        levels.append(LevelMeasure(tree.levels[level].display, int(holds.sum()), int(is_free.sum()),
                                   free_counts[level], unit_counts[level], children))
    if tree.levels[-1].key != HOSTNAME_LABEL:          # else the finest level is the nodes already
        levels.append(LevelMeasure("node", int(units.sum()), int(whole.sum()), whole.astype(np.int64),
                                   units.astype(np.int64), None))
    largest = []
    for shape in shapes:
        request = shape.vector(resources)
        now = _largest_per_level(tree, pods_per_node(free, request, usable & member))
        back = None
        if reclaimable is not None:
            back = _largest_per_level(tree, pods_per_node(free + reclaimable, request, usable & member))
        for position, (level, pods, domain) in enumerate(now):
            item = Largest(shape.name, level, pods, domain)
            if back is not None:
                item.pods_reclaimed, item.domain_reclaimed = back[position][1], back[position][2]
            largest.append(item)
    return TreeMeasure(tree.name, unit, levels, largest, below_priority)


def _largest_per_level(tree: TopologyTree, per_node: np.ndarray) -> list[tuple[str, int, str | None]]:
    """(level, most pods in one domain, that domain), the whole cluster first, then coarsest to finest."""
    sums = sum_by_level(tree, per_node)
    total = int(per_node[tree.member].sum())
    found = [(CLUSTER, total, None)]
    for level in range(tree.depth):
        if sums[level].size == 0:
            found.append((tree.levels[level].display, 0, None))
            continue
        best = int(np.argmax(sums[level]))
        pods = int(sums[level][best])
        found.append((tree.levels[level].display, pods, tree.domain_ids[level][best] if pods else None))
    return found


def reclaimable_below(node_count: int, resource_count: int, pods: Sequence[tuple[int, np.ndarray, int]],
                      priority: int) -> np.ndarray:
    """Per node, the requests of the pods `(node, request, priority)` whose priority is below `priority`."""
    back = np.zeros((node_count, resource_count), dtype=np.int64)
    for node, request, pod_priority in pods:
        if pod_priority < priority:
            back[node] += request
    return back


def closest_domains(tree: TopologyTree, level: int, free: np.ndarray,
                    roles: Sequence[tuple[np.ndarray, np.ndarray, int]], top: int = 3) -> list[tuple[int, int, int]]:
    """For a gang that must stay in one domain of `level`: the `top` domains holding the most of its
    pods by capacity, as (domain, pods that fit, pods needed). `roles`: (request, usable nodes, pods
    needed) per role; a role's pods beyond its need do not count for another role."""
    needed = sum(count for _, _, count in roles)
    placeable = np.zeros(tree.domain_count(level), dtype=np.int64)
    for request, usable, count in roles:
        fit = sum_by_level(tree, pods_per_node(free, request, np.asarray(usable, dtype=bool) & tree.member))[level]
        placeable += np.minimum(fit, count)
    order = np.lexsort((np.arange(placeable.size), -placeable))[:top]
    return [(int(d), int(placeable[d]), needed) for d in order]


# --- keeping whole domains free: scores for pods that are not gangs ---------------------------------------

PLAIN_MODES = ("binpack", "spread", "neutral")
NODE_WEIGHT = 0.55               # the node's own fill; the rest goes to its domains, finest level first


def packing_scores(tree: TopologyTree | None, allocatable: np.ndarray, free: np.ndarray, request: np.ndarray,
                   nodes: np.ndarray, column: int, mode: str = "binpack") -> np.ndarray:
    """0..10 for each node index in `nodes` (-1: not a node of the cluster, 0) for a pod of `request`
    that belongs to no gang. binpack (KAI's GPU packing, Kueue's BestFit): the fuller the node would be
    with the pod, in the unit resource (`column`), the better, then the fuller its rack, block, zone, so
    partly used nodes and domains fill first and whole nodes, racks and blocks stay free; spread: the
    reverse; neutral: 5 everywhere. The best candidate scores 10, the next 9, and so on (the order is
    what matters); a node the pod does not fit on scores 0."""
    nodes = np.asarray(nodes, dtype=np.int64)
    if mode == "neutral":
        return np.full(len(nodes), 5, dtype=np.int64)
    if mode not in PLAIN_MODES:
        raise ValueError(f"plain pod scoring {mode!r} is not valid; valid: {', '.join(PLAIN_MODES)}")
    known = nodes >= 0
    at = np.where(known, nodes, 0)
    fits = known & (free[at] >= request).all(axis=1)
    total = allocatable[:, column]
    used = np.maximum(total - free[:, column], 0)
    share = np.clip((used[at] + request[column]) / np.maximum(total[at], 1), 0, 1)
    score = NODE_WEIGHT * share
    if tree is not None:
        used_sums, total_sums = sum_by_level(tree, used), sum_by_level(tree, total)
        weights = [2.0 ** -(tree.depth - level) for level in range(tree.depth)]    # finest level weighs most
        scale = (1 - NODE_WEIGHT) / sum(weights)
        member = tree.member[at]
        for level in range(tree.depth):
            domain = np.where(member, tree.node_domain[level][at], 0)
            level_share = used_sums[level][domain] / np.maximum(total_sums[level][domain], 1)
            score = score + np.where(member, weights[level] * scale * level_share, 0)
    else:
        score = score / NODE_WEIGHT
    return np.where(fits, _ranks(np.rint(score * 1e6) if mode == "binpack" else -np.rint(score * 1e6), fits), 0)


def _ranks(values: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """10 for the best value among the nodes that fit, 9 for the next distinct one, ... 1 for the rest:
    an extender score has 11 steps, and its order is what kube-scheduler weighs (x20 in our profile)."""
    distinct = np.unique(values[fits])[::-1]
    rank = np.searchsorted(-distinct, -values)
    return np.clip(10 - rank, 1, 10).astype(np.int64)
