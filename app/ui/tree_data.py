"""The topology tree the page draws, built outside the scheduling path and served in pieces.

At fleet size the whole tree is megabytes and takes the better part of a second to build, so:
- under the state lock only a snapshot is copied (capacity matrices, nodes, who holds what); the sums,
  the entries and the JSON are built after the lock is released;
- a request may ask for `depth` levels below a `domain` (the overview: zones and blocks, each with a heat
  strip of its children's usable free capacity; a click expands one domain);
- every answer carries an ETag of the cluster generation; an unchanged tree is a 304 and a repeated
  request of the same generation is served from a small cache.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import orjson

from topology.counts import sum_by_level
from topology.fragmentation import unit_resource, whole_free_nodes
from topology.tree import HOSTNAME_LABEL, TopologyTree

HOLDERS_SHOWN = 8          # pods listed per node ("who holds the used GPUs")


@dataclass
class Snapshot:
    generation: int
    tree: TopologyTree
    nodes: list
    resources: list[str]
    columns: list[int]
    matrices: dict[str, np.ndarray]
    reservations: list[tuple[str, int]]        # (gang slot key, node)
    pods: list[tuple[str, int]]                # (pod key, node)
    unit: str = ""                             # what whole nodes are counted in (nvidia.com/gpu, else cpu)
    units: np.ndarray | None = None            # nodes with some of it
    whole: np.ndarray | None = None            # usable nodes with all of it free (topology/fragmentation.py)


def snapshot(service, tree: TopologyTree, resources: list[str]) -> Snapshot:
    """What the tree needs, copied (call under the state lock: this is the only part that holds it)."""
    cluster = service.cluster
    usable, unusable = cluster.usable_free()
    columns = [cluster.resources.column[r] for r in resources]
    capacity = cluster.capacity
    matrices = {"allocatable": capacity.allocatable[:, columns].copy(), "used": capacity.used[:, columns].copy(),
                "reserved": capacity.reserved[:, columns].copy(), "free": usable[:, columns],
                "unusable": unusable[:, columns]}
    unit = unit_resource(list(cluster.resources.names))
    units = whole = np.zeros(len(cluster.nodes), dtype=bool)
    if unit in cluster.resources.column:
        units, whole = whole_free_nodes(capacity.allocatable, capacity.free, ~cluster.unusable_nodes(),
                                        cluster.resources.column[unit])
    return Snapshot(service.generation, tree, list(cluster.nodes), list(resources), columns, matrices,
                    [(key, usage.node) for key, usage in cluster.reservations.items()],
                    [(key, usage.node) for key, usage in cluster.pods.items()], unit, units, whole)


def build(snap: Snapshot, depth: int | None = None, domain: str | None = None) -> dict:
    """The tree from the top (or from `domain`), `depth` levels deep (None: down to the nodes)."""
    tree, resources = snap.tree, snap.resources
    sums = {kind: [sum_by_level(tree, matrix[:, i]) for i in range(len(resources))]
            for kind, matrix in snap.matrices.items()}
    reservations: dict[int, list[str]] = {}
    for key, node in snap.reservations:
        reservations.setdefault(node, []).append(key.removeprefix("gang:"))
    holders: dict[int, list[str]] = {}
    for key, node in snap.pods:
        holders.setdefault(node, []).append(key)

    unit_sums = sum_by_level(tree, snap.units & tree.member)
    whole_sums = sum_by_level(tree, snap.whole & tree.member)
    whole_domain = [(unit_sums[level] > 0) & (whole_sums[level] == unit_sums[level]) for level in range(tree.depth)]

    def figures(level: int, index: int) -> dict:
        found = {kind: {r: int(sums[kind][i][level][index]) for i, r in enumerate(resources)} for kind in sums}
        found["whole"] = {"unit": snap.unit, "free_nodes": int(whole_sums[level][index]),
                          "nodes": int(unit_sums[level][index])}
        if level + 1 < tree.depth and tree.levels[level + 1].key != HOSTNAME_LABEL:
            children = tree.children_of(level, index)
            found["whole"].update({"free_children": int(whole_domain[level + 1][children].sum()),
                                   "children": int(len(children)), "child_level": tree.levels[level + 1].display})
        return found

    def node_entry(index: int) -> dict:
        node = snap.nodes[index]
        held = sorted(holders.get(index, []))
        entry = {"node": node.name, "ready": node.ready, "schedulable": not node.unschedulable,
                 "whole_free": bool(snap.whole[index]),
                 "taints": [f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in node.taints],
                 "pods": len(held), "holders": held[:HOLDERS_SHOWN],
                 "reservations": sorted(reservations.get(index, []))}
        entry.update({kind: {r: int(matrix[index, i]) for i, r in enumerate(resources)}
                      for kind, matrix in snap.matrices.items()})
        return entry

    def walk(level: int, index: int, left: int | None) -> dict:
        entry = {"level": tree.levels[level].display, "id": tree.domain_ids[level][index],
                 "value": tree.domain_value(level, index), **figures(level, index)}
        if level + 1 < tree.depth:
            children = [int(c) for c in tree.children_of(level, index)]
            if left is not None and left <= 0:
                entry["collapsed"] = len(children)
                entry["strip"] = [{"id": tree.domain_ids[level + 1][c], "value": tree.domain_value(level + 1, c),
                                   **figures(level + 1, c)} for c in children]
            else:
                entry["children"] = [walk(level + 1, c, None if left is None else left - 1) for c in children]
        else:
            entry["nodes"] = [node_entry(int(i)) for i in tree.nodes_in(level, index)]
        return entry

    if domain is None:
        roots = [walk(0, root, None if depth is None else depth - 1) for root in range(tree.domain_count(0))]
    else:
        level = _level_of(tree, domain)
        roots = [walk(level, tree.domain_index[level][domain], None if depth is None else depth - 1)]
    return {
        "name": tree.name, "source": tree.source, "generation": snap.generation,
        "levels": [level.display for level in tree.levels],
        "resources": resources,
        "units": {r: ("millicores" if r == "cpu" else "bytes" if r in ("memory", "ephemeral-storage")
                      else "units") for r in resources},
        "nodes": int(tree.member.sum()),
        "domains": roots,
        "excluded": dict(tree.excluded),
        "totals": {kind: {r: int(np.asarray(matrix[:, i])[tree.member].sum()) for i, r in enumerate(resources)}
                   for kind, matrix in snap.matrices.items()},
    }


def _level_of(tree: TopologyTree, domain: str) -> int:
    for level, index in enumerate(tree.domain_index):
        if domain in index:
            return level
    raise KeyError(domain)


class TreeCache:
    """Serialized answers of the current generation, keyed by the request (a few entries)."""

    def __init__(self, size: int = 32):
        self.size = size
        self._answers: OrderedDict[tuple, tuple[str, bytes]] = OrderedDict()

    def get(self, key: tuple) -> tuple[str, bytes] | None:
        found = self._answers.get(key)
        if found is not None:
            self._answers.move_to_end(key)
        return found

    def put(self, key: tuple, body: dict) -> tuple[str, bytes]:
        etag = f'"{key[0]}-{abs(hash(key)) % 10**8}"'
        answer = (etag, orjson.dumps(body))
        self._answers[key] = answer
        while len(self._answers) > self.size:
            self._answers.popitem(last=False)
        return answer
