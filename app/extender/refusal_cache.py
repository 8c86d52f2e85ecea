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
from .admitted import shape
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
    if tree is not plan.tree and not same_plan_inputs(plan.tree, tree):   # the workload changed
        return False
    return not state.changes.freed_since(key.mark, key.nodes)


def same_plan_inputs(a: GroupTree, b: GroupTree) -> bool:
    """Both trees plan alike: same groups (levels, sizes, minimums), topology, strategy, priority and, per
    role, the same placement shape and pod terms. Not whole pods: the Job controller gives each pod its own
    hostname, subdomain and index env, and a retry by the next pod of a refused gang is not a new workload."""
    return (a.root == b.root and a.topology == b.topology and a.strategy == b.strategy
            and a.priority == b.priority and a.preemption_policy == b.preemption_policy
            and _roles(a) == _roles(b))


def _roles(tree: GroupTree) -> dict:
    return {name: (role.replicas, shape(role.pod_spec), getattr(role.pod_spec, "pod_terms", ()), role.pod_labels)
            for name, role in tree.roles.items()}


def _bound(state: ServiceState, gang: str) -> frozenset:
    return frozenset(state.bound.get(gang, {}).items())
