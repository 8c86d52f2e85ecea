"""The two pure libraries as the service calls them: the grouper (which gang and slot is this pod?) and
the planner (where does the gang go?), fed from the service state."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from grouper import GroupingError, PodIdentity, group_podgroup, identify_pod, owner_of, podgroup_identities
from grouper.node_limit import role_limits
from grouper.names import KAI_PODGROUP_ANNOTATION, OPT_IN_PREFIXES
from topology.cluster import pod_key
from topology.objects import group_of
from topology.groups import GroupTree, Slot
from topology.plan import Plan, PlanInput
from topology.planner import plan_gang

from ..state import ServiceState
from ..state.identities import podgroup_member_key
from ..state.identities import version as _version
from . import native_groups, pod_affinity
from .candidates import candidate_mask
from .occupancy import exclusive_occupancy, occupied_count
from .plan_input import gang_plan_input

__all__ = ["GroupingError", "exclusive_occupancy", "identify", "occupied_count", "plan", "plan_input"]


def _opted_in(pod: Mapping) -> bool:
    metadata = pod.get("metadata") or {}
    keys = list((metadata.get("annotations") or {})) + list((metadata.get("labels") or {}))
    return any(key.startswith(OPT_IN_PREFIXES) for key in keys) or KAI_PODGROUP_ANNOTATION in keys


def owner_key(pod: Mapping) -> tuple[str, str, str, str] | None:
    """(api group, kind, namespace, name) of the workload or PodGroup the pod belongs to."""
    owner = owner_of(pod)
    return None if owner is None else (group_of(owner.api_version), owner.kind, owner.namespace, owner.name)


def workload_of(state: ServiceState, pod: Mapping) -> Mapping | None:
    """The workload object (or PodGroup) the pod belongs to, as the watch has it."""
    owner = owner_of(pod)
    if owner is None:
        return None
    return state.objects.get(owner.kind, owner.namespace, owner.name, group=group_of(owner.api_version))


def identify(state: ServiceState, pod: Mapping) -> PodIdentity | None:
    """The pod's gang and slot; None for a plain pod (or one whose owner's kind is not watched, such as a
    ReplicaSet or a custom kind missing from --extra-kinds). Raises GroupingError for a pod whose workload
    is invalid, or whose PodGroup / opted-in workload the service has not seen yet (the scheduler retries)."""
    native = native_groups.identify(state, pod)      # a native gang PodGroup (spec.schedulingGroup) first
    if native is not None:
        return native
    owner = owner_of(pod)
    if owner is None:
        return None
    workload = state.objects.get(owner.kind, owner.namespace, owner.name, group=group_of(owner.api_version))
    if workload is None:
        watched = state.watches(group_of(owner.api_version), owner.kind)
        if watched and (owner.kind == "PodGroup" or _opted_in(pod)):
            raise GroupingError(f"{owner.kind} {owner.namespace}/{owner.name} of pod "
                                f"{pod_key(pod)} is not known to the extender yet (waiting for the watch)")
        return None
    topologies = state.cluster.topologies
    if owner.kind == "PodGroup":
        indexed = _indexed_podgroup_identity(state, pod, owner, workload, topologies)
        if indexed is not None:
            return indexed
        members = _members(state, pod, owner)
        everyone = [*members, pod]
        # one grouping per PodGroup version and member set, not one per call (3 calls per pod: O(n^2))
        key = ("podgroup", _version(workload), tuple(sorted(map(podgroup_member_key, everyone))), state.rebuilds)
        tree = _cached(state, key, lambda: group_podgroup(workload, everyone, topologies))
        return identify_pod(pod, workload, topologies, pods=members, trees=[tree])

    cache = state.identities
    classes_version = cache.classes()[1]

    def identity():    # one grouping per workload version, shared with the webhook, not one per pod
        trees, shape = cache.grouped(workload, topologies)
        return identify_pod(pod, workload, topologies, trees=trees, shape=shape)
    key = (_version(pod), _version(workload), owner.group_index, state.rebuilds, classes_version)
    return _cached(state, key, identity)


def _cached(state: ServiceState, key: tuple, compute):
    return state.identities.get(key, compute)


def _indexed_podgroup_identity(state: ServiceState, pod: Mapping, owner, workload: Mapping,
                               topologies) -> PodIdentity | None:
    """The identity of a watched member of a PodGroup, from every member's identity computed at once per
    member set (state.podgroup_versions: a member joined, left or changed what its grouping reads). A pod's
    slot is its position among its leaf's pods: asked pod by pod, each of a gang's filter, bind and webhook
    calls walked every member (O(n^2) per gang: 8 ms a call at 256 members). None for a pod that is not the
    indexed one (a request's copy): the caller then identifies it alone."""
    group = (owner.namespace, owner.name)
    name = (pod.get("metadata") or {}).get("name")
    members = state.podgroup_pods.get(group) or {}
    if members.get(name) is not pod or group not in state.podgroup_versions:
        return None
    key = ("podgroup members", _version(workload), state.podgroup_versions[group], state.rebuilds)

    def every_identity():
        return podgroup_identities(workload, [p for p in members.values() if owner_of(p) == owner], topologies)
    return _cached(state, key, every_identity).get(name)


def _members(state: ServiceState, pod: Mapping, owner) -> list[Mapping]:
    """The other pods of the same PodGroup (indexed by the state from the watch and from requests)."""
    candidates = state.podgroup_pods.get((owner.namespace, owner.name), {})
    name = (pod.get("metadata") or {}).get("name")
    return [p for member, p in candidates.items() if member != name and owner_of(p) == owner]


def plan(state: ServiceState, tree: GroupTree, *, bound: Mapping[Slot, str],
         candidates: Mapping[str, Sequence[str]] | None = None, free: np.ndarray | None = None) -> Plan:
    """Plan a gang on the current cluster, or a refusal that says why."""
    try:
        result = plan_gang(plan_input(state, tree, bound=bound, candidates=candidates, free=free))
    except (ValueError, KeyError) as err:       # PlanError, LevelError, unknown topology
        return Plan(False, reason=str(err).strip("'\""))
    if not result.placed:
        result.reason += "".join(f"; {role} pods take {_per_node(limit.pods)} ({limit.why})"
                                 for role, limit in sorted(role_limits(tree).items()))
    apart = pod_affinity.apart(tree, state.cluster.topologies.get(tree.topology or ""))
    if not result.placed and apart:
        result.reason += "; " + ", ".join(f"{role} pods take one {key} each (required pod anti-affinity on {key})"
                                          for role, key in sorted(apart.items()))
    return result


def plan_input(state: ServiceState, tree: GroupTree, *, bound: Mapping[Slot, str],
               candidates: Mapping[str, Sequence[str]] | None = None, free: np.ndarray | None = None,
               others: np.ndarray | None = None) -> PlanInput:
    """The planner's input for a gang on the current cluster. `bound`: slots pinned to nodes (by name);
    `candidates`: for some roles, the node names the scheduler offered (the usable set for that role);
    `others`: exclusive_occupancy(state, tree), computed here unless the caller already has it."""
    cluster = state.cluster
    index = cluster.node_index
    pins = {slot: index[node] for slot, node in bound.items() if node in index}
    masks = None
    if candidates:
        masks = {}
        for role, names in candidates.items():
            masks[role] = candidate_mask(names, index, len(cluster.nodes))
    if others is None:
        others = exclusive_occupancy(state, tree)
    return gang_plan_input(cluster, tree, strategy=state.settings.strategy, pods=state.objects.list("Pod"),
                           occupied=None if others is None else others > 0, bound=pins, candidates=masks, free=free)


def _per_node(pods: int) -> str:
    return "one pod per node" if pods == 1 else f"at most {pods} pods per node"
