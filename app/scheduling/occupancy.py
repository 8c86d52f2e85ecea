"""Who takes a domain from an exclusive gang (LWS exclusive-topology / subgroup-exclusive-topology), in
the service: a node counts as occupied when it runs (or holds a reservation for) a pod of another LWS group
or of another gang with an exclusive group (the rule is grouper/exclusive.py's, shared with the offline
tools). DaemonSet pods and unrelated pods do not.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from grouper import keeps_apart, lws_gang, names
from grouper.names import is_reservation, reservation_gang
from topology.groups import GroupTree

from ..state import ServiceState


def _not_own(pod: Mapping | None, tree: GroupTree) -> bool:
    metadata = (pod or {}).get("metadata") or {}
    return not ((metadata.get("annotations") or {}).get(names.KAI_PODGROUP_ANNOTATION) == tree.name and
                (metadata.get("namespace") or "default") == tree.namespace)


def _other_gang_pod(pod: Mapping | None, tree: GroupTree) -> bool:
    return _not_own(pod, tree) and lws_gang(pod or {}) is not None


def occupied_count(state: ServiceState, tree: GroupTree,
                   also: Callable[[Mapping, str], bool] | None = None) -> np.ndarray:
    """Per node, the pods and reservations of other LWS groups and other exclusive gangs. `also`: pods
    that count as well (preemption counts every pod it could evict, then subtracts its victims)."""
    cluster = state.cluster
    counts = np.zeros(len(cluster.nodes), dtype=np.int64)
    own_pods = {key for key, _ in state.bound.get(tree.key, {}).values()}
    counted: set[str] = set()
    for gang, held in state.bound.items():
        plan = state.plans.get(gang)
        if gang == tree.key or not keeps_apart(plan.tree if plan else None):
            continue
        for key, node in held.values():
            if node in cluster.node_index:
                counts[cluster.node_index[node]] += 1
                counted.add(key)
    for key, usage in cluster.pods.items():
        if key in own_pods or key in counted:
            continue
        namespace, _, name = key.partition("/")
        pod = state.find_pod(namespace, name)
        if _other_gang_pod(pod, tree) or (also is not None and _not_own(pod, tree) and also(pod or {}, key)):
            counts[usage.node] += 1
    for key, usage in cluster.reservations.items():
        gang = reservation_gang(key)
        plan = state.plans.get(gang)
        if is_reservation(key) and gang != tree.key and keeps_apart(plan.tree if plan else None):
            counts[usage.node] += 1
    return counts


def exclusive_occupancy(state: ServiceState, tree: GroupTree,
                        also: Callable[[Mapping, str], bool] | None = None) -> np.ndarray | None:
    """occupied_count for a gang with an exclusive group; None (nothing to keep apart) otherwise."""
    return occupied_count(state, tree, also) if any(g.exclusive for g in tree.groups()) else None
