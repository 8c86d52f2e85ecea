"""Who takes a domain from an exclusive gang (LWS exclusive-topology / subgroup-exclusive-topology), in
the service: the count is the cluster model's own (`Cluster.apart_count`, the same as the offline tools
read), over the pods and reservations the state marks by grouper/exclusive.py's rule (`apart_owner`: pods of
another LWS group or of another gang with an exclusive group, and such gangs' reservations). DaemonSet pods
and unrelated pods do not count.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from grouper import names
from topology.groups import GroupTree

from ..state import ServiceState


def _not_own(pod: Mapping | None, tree: GroupTree) -> bool:
    metadata = (pod or {}).get("metadata") or {}
    return not ((metadata.get("annotations") or {}).get(names.KAI_PODGROUP_ANNOTATION) == tree.name and
                (metadata.get("namespace") or "default") == tree.namespace)


def occupied_count(state: ServiceState, tree: GroupTree,
                   also: Callable[[Mapping, str], bool] | None = None) -> np.ndarray:
    """Per node, the pods and reservations of other LWS groups and other exclusive gangs. `also`: pods
    that count as well (preemption counts every pod it could evict, then subtracts its victims)."""
    cluster = state.cluster
    own_pods = {key for key, _ in state.bound.get(tree.key, {}).values()}
    counts = cluster.apart_count(tree.key, skip=own_pods)
    if also is None:
        return counts
    for key, usage in cluster.pods.items():
        if key in own_pods or key in cluster.apart:
            continue
        namespace, _, name = key.partition("/")
        pod = state.find_pod(namespace, name)
        if _not_own(pod, tree) and also(pod or {}, key):
            counts[usage.node] += 1
    return counts


def exclusive_occupancy(state: ServiceState, tree: GroupTree,
                        also: Callable[[Mapping, str], bool] | None = None) -> np.ndarray | None:
    """occupied_count for a gang with an exclusive group; None (nothing to keep apart) otherwise."""
    return occupied_count(state, tree, also) if any(g.exclusive for g in tree.groups()) else None
