"""When a refused gang may be given its cached refusal instead of being planned again (issue 14 item 1,
issue 31 sections 3 and 4).

A refusal depends on the gang (its group tree, its roles' placement shapes, its bound slots, its priority)
and on the room in the nodes it could use. Pods starting elsewhere, binds, other gangs' plans: none of
them can make it fit, so none of them re-plan it; only room freed where more of its pods now fit, a node
opening up, a rebuild of the cluster (nodes added or re-labelled, topologies changed) or a change of its
own does.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from topology.groups import GroupTree
from topology.nodes import PodPlacementRules
from topology.plan import Plan

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
    never_fits: bool = False           # refused even on the empty cluster: freed room never helps
    request: np.ndarray | None = None  # the one request all its roles share (None: any room freed re-plans)
    fits: np.ndarray | None = None     # per node: pods of `request` that fitted when it was refused
    offered: Mapping[str, tuple[list, frozenset]] = field(default_factory=dict)  # role -> candidates refused on


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


def refusal_key(state: ServiceState, tree: GroupTree, result: Plan,
                candidates: Mapping[str, Sequence[str]] | None = None) -> RefusalKey:
    """What the refusal of `tree` (the planner's `result`, on kube-scheduler's `candidates` for some roles)
    depends on, taken when it is refused."""
    request = None if _other_pods_matter(tree) else _shared_request(state, tree)
    fits = None if request is None else _fits(state.cluster.free, request)
    return RefusalKey(state.changes.mark(), usable_nodes(state, tree), _bound(state, tree.key), tree.priority,
                      never_fits=never_fits(result) and not _other_pods_matter(tree), request=request, fits=fits,
                      offered={role: (list(names), frozenset(names)) for role, names in (candidates or {}).items()})


def never_fits(result: Plan) -> bool:
    """The planner found no room even on the empty cluster, judged on every node the gang may use (not
    only on kube-scheduler's candidates, which leave out nodes that are merely busy)."""
    return bool(result.details.get("never_fits")) and not (result.details.get("excluded") or {}).get("not a candidate")


def still_refused(state: ServiceState, plan: GangPlan, tree: GroupTree,
                  candidates: Mapping[str, Sequence[str]] | None = None) -> bool:
    """The cached refusal still answers for `tree` (the gang as its pod identifies it now). Room freed
    re-plans it only where it could change the answer: on a node the gang may use, where more of its pods
    fit than when it was refused (freed CPU does not help a gang that lacks GPUs), and never for a gang
    that can never fit. A node turning Ready, uncordoned or untainted anywhere re-plans it, and so do
candidates kube-scheduler did not offer when it was refused (its view of freed room trails ours)."""
    key = plan.refusal
    if not isinstance(key, RefusalKey):
        return False
    if tree.priority != key.priority or _bound(state, tree.key) != key.bound:
        return False
    if tree is not plan.tree and not same_plan_inputs(plan.tree, tree):   # the workload changed
        return False
    for role, names in (candidates or {}).items():       # kube-scheduler offers nodes it did not then
        if role in key.offered and not _offered_before(key.offered[role], names):
            return False
    changes = state.changes
    if changes.opened_since(key.mark):
        return False
    if key.never_fits:
        return True
    freed = changes.freed_nodes(key.mark, key.nodes)
    if freed.size == 0:
        return True
    if key.fits is None:
        return False
    return not (_fits(state.cluster.free[freed], key.request) > key.fits[freed]).any()


def _offered_before(offered: tuple[list, frozenset], names: Sequence[str]) -> bool:
    """`names` are among the candidates offered then: usually the very same list (compared without hashing
    16k fresh strings), else a subset."""
    return names == offered[0] or offered[1].issuperset(names)


def _other_pods_matter(tree: GroupTree) -> bool:
    """Pod (anti-)affinity, spread constraints or exclusive domains: where the gang fits depends on which
    pods run where, not only on free room."""
    if any(group.exclusive for group in tree.groups()):
        return True
    for role in tree.roles:
        spec = tree.pod_spec(role)
        affinity = spec.get("affinity") or {}
        if affinity.get("podAffinity") or affinity.get("podAntiAffinity") or spec.get("topologySpreadConstraints") \
                or getattr(spec, "pod_terms", ()) or getattr(spec, "node_limit", None) is not None:
            return True
    return False


def _shared_request(state: ServiceState, tree: GroupTree) -> np.ndarray | None:
    """The request vector of the gang's pods when every role asks the same, else None (mixed roles pack
    together on a node: freed room may fit a mix where it fits no more pods of any one role)."""
    vectors = {state.cluster.resources.vector(state.cluster.pod_demand(tree.pod_spec(role), tree.namespace)).tobytes(): role
               for role in {slot.role for slot in tree.slots()}}
    if len(vectors) != 1:
        return None
    (role,) = vectors.values()
    return state.cluster.resources.vector(state.cluster.pod_demand(tree.pod_spec(role), tree.namespace))


def _fits(free: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Pods of `request` each row of `free` holds."""
    columns = np.flatnonzero(request > 0)
    if columns.size == 0:
        return np.full(len(free), np.iinfo(np.int64).max, dtype=np.int64)
    return (np.maximum(free[:, columns], 0) // request[columns]).min(axis=1)


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
