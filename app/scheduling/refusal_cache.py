"""When a refused gang may be given its cached refusal instead of being planned again (issue 14 item 1).

A refusal depends on the gang (its pods, its bound slots, its priority) and on the room in the nodes it
could use. Pods starting elsewhere, binds, other gangs' plans: none of them can make it fit, so none of
them re-plan it; only room freed on a node it could use, a rebuild of the cluster (nodes added or
re-labelled, topologies changed) or a change of its own does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.groups import GroupTree
from topology.nodes import PodPlacementRules

from ..state.changes import Mark
from ..state.plans import GangPlan
from ..state import ServiceState


@dataclass(frozen=True, eq=False)
class RefusalKey:
    mark: Mark
    nodes: np.ndarray                  # nodes any of its roles may use
    bound: frozenset                   # its slots held by bound pods
    priority: int


def usable_nodes(state: ServiceState, tree: GroupTree) -> np.ndarray:
    """Nodes any role of the gang may use (selectors, affinity, tolerations); every node for a gang with
    an exclusive group, which a pod leaving any node of a domain may let in."""
    cluster = state.cluster
    if any(group.exclusive for group in tree.groups()):
        return np.ones(len(cluster.nodes), dtype=bool)
    mask = np.zeros(len(cluster.nodes), dtype=bool)
    for role in {slot.role for slot in tree.slots()}:
        mask |= cluster.usable(PodPlacementRules.from_spec(tree.pod_spec(role)))
    return mask


def refusal_key(state: ServiceState, tree: GroupTree) -> RefusalKey:
    return RefusalKey(state.changes.mark(), usable_nodes(state, tree), _bound(state, tree.key), tree.priority)


def still_refused(state: ServiceState, plan: GangPlan, tree: GroupTree) -> bool:
    """The cached refusal still answers for `tree` (the gang as its pod identifies it now)."""
    key = plan.refusal
    if not isinstance(key, RefusalKey):
        return False
    if tree.priority != key.priority or _bound(state, tree.key) != key.bound:
        return False
    if tree is not plan.tree and tree != plan.tree:        # the workload changed (requests, levels, sizes)
        return False
    return not state.changes.freed_since(key.mark, key.nodes)


def _bound(state: ServiceState, gang: str) -> frozenset:
    return frozenset(state.bound.get(gang, {}).items())
