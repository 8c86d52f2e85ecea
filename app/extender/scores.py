"""Prioritize for a gang pod: its planned node scores 10; the other candidates 9 inside the slot's
segment (or nearest constrained group) domain and one less per extra topology hop; 0 off the tree."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topology.counts import hop_distances
from topology.fragmentation import packing_scores, unit_resource
from topology.resources import pod_requests
from topology.groups import GroupTree, Slot
from topology.tree import TopologyTree

from ..state.plans import GangPlan, SlotState
from ..state import ServiceState

NEUTRAL_SCORE = 5
MAX_SCORE = 10


class Scorer:
    def __init__(self, state: ServiceState):
        self.state = state
        self._distances: dict[tuple, np.ndarray] = {}     # (topology, level, domain) -> hops per node
        self._cluster = None                               # the Cluster the cache belongs to

    def scores(self, plan: GangPlan, slot_state: SlotState, candidates: Sequence[str]) -> list[int]:
        cluster = self.state.cluster
        distances, inside = self._domain_distances(plan, slot_state)
        index = cluster.node_index
        nodes = np.fromiter((index.get(name, -1) for name in candidates), dtype=np.int64, count=len(candidates))
        if distances is None:
            scores = np.zeros(len(candidates), dtype=np.int64)
        else:
            hops = np.where(nodes >= 0, distances[np.maximum(nodes, 0)], -1)
            scores = np.where(hops >= 0, np.clip(MAX_SCORE - 1 - (hops - inside), 0, MAX_SCORE - 1), 0)
        scores[nodes == index.get(slot_state.node or "", -2)] = MAX_SCORE
        return scores.tolist()

    def plain(self, pod, candidates: Sequence[str]) -> list[int] | int:
        """A pod of no gang: the plain_pods setting (binpack by default) for pods that request the unit
        resource (GPUs, or cpu on a cluster without them); neutral for the rest (kube-scheduler's own
        scores decide)."""
        mode = self.state.settings.plain_pods
        if mode == "neutral":
            return NEUTRAL_SCORE
        cluster = self.state.cluster
        unit = unit_resource(list(cluster.resources.names))
        column = cluster.resources.column.get(unit)
        try:
            request = cluster.resources.vector(pod_requests((pod or {}).get("spec") or {}))
        except ValueError:
            return NEUTRAL_SCORE
        if column is None or request[column] <= 0:
            return NEUTRAL_SCORE
        topologies = cluster.topologies
        tree = topologies.get("default") or (topologies[min(topologies)] if topologies else None)
        index = cluster.node_index
        nodes = np.fromiter((index.get(name, -1) for name in candidates), dtype=np.int64, count=len(candidates))
        # candidates passed kube-scheduler's filter: no usability mask needed (it would cost a loop over nodes)
        return packing_scores(tree, cluster.capacity.allocatable, cluster.capacity.free, request, nodes, column,
                              mode).tolist()

    def _domain_distances(self, plan: GangPlan, slot_state: SlotState) -> tuple[np.ndarray | None, int]:
        """Hops from the slot's domain to every node, and the hops of the nodes inside that domain."""
        cluster = self.state.cluster
        tree = cluster.topologies.get(plan.topology or "")
        if tree is None:
            return None, 0
        if self._cluster is not cluster:
            self._distances, self._cluster = {}, cluster
        place = slot_domain(plan, slot_state.slot, tree)
        if place is None:
            node = cluster.node_index.get(slot_state.node or "")
            if node is None:
                return None, 0
            place = (tree.depth, node)
        key = (tree.name,) + place
        if key not in self._distances:
            self._distances[key] = hop_distances(tree, *place)
        return self._distances[key], tree.depth - place[0] if place[0] < tree.depth else 0


def slot_domain(plan: GangPlan, slot: Slot, tree: TopologyTree) -> tuple[int, int] | None:
    """(level, domain) of the innermost constrained group holding the slot (its segment first)."""
    try:
        path = group_path(plan.tree, slot)
    except KeyError:
        return None
    for group_name in reversed(path):
        placement = plan.groups.get(group_name)
        if placement is None or placement.level is None or placement.domain is None:
            continue
        try:
            level = tree.level_index(placement.level)
        except ValueError:            # "node" or a level of another topology
            continue
        domain = tree.domain_index[level].get(placement.domain)
        if domain is not None:
            return level, domain
    return None


def group_path(tree: GroupTree, slot: Slot) -> list[str]:
    """Names of the groups from the root down to the leaf holding the slot."""
    def walk(group, trail):
        trail = trail + [group.name]
        if slot in group.slots:
            return trail
        for child in group.children:
            found = walk(child, trail)
            if found:
                return found
        return None
    path = walk(tree.root, [])
    if path is None:
        raise KeyError(str(slot))
    return path
