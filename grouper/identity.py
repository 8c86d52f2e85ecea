"""One pod's place in its gang: role, index, leaf subgroup and segment, read from the labels its
controller set. The admission webhook injects these into the pod."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topology.groups import GroupTree, SegmentInfo, Slot
from topology.tree import TopologyTree

from . import names
from .errors import describe
from .kinds import RoleTemplate, WorkloadShape, workload_shape
from .kinds.pods import index_of, labels_of, pod_error
from .podgroups import belongs, group_podgroup, is_podgroup, leaf_pods, pod_subgroup
from .workloads import group_workload

UNINDEXED = -1      # Slot.index of a pod whose role does not number its pods (the pods are interchangeable)


@dataclass(frozen=True)
class PodIdentity:
    tree: GroupTree
    gang: str                        # namespace/name of the gang (its PodGroup)
    podgroup_name: str
    slot: Slot
    subgroup: str                    # the leaf group holding the pod ("worker-2")
    segment: SegmentInfo | None
    rank: int | None                 # position inside the segment, 0-based
    topology: str | None
    warnings: list[str] = field(default_factory=list)
    owner: tuple | None = None       # (api group, kind, namespace, name) whose deletion ends the gang, when not the pod's owner
    native_key: str | None = None    # its native PodGroup's topology key: kube-scheduler offers one domain of it at a time


def _role_of(pod: Mapping, workload: Mapping, shape: WorkloadShape) -> RoleTemplate:
    if shape.kind.pod_role is not None:
        return shape.kind.pod_role(pod, shape)
    labels = labels_of(pod)
    key = shape.kind.role_label
    if key is None or (len(shape.roles) == 1 and key not in labels):
        return shape.roles[0]
    value = labels.get(key)
    role = shape.role(str(value).lower()) if value is not None else None
    if role is None:
        valid = ", ".join(role.name for role in shape.roles)
        raise pod_error(pod, f"label {key}={value!r} does not name a role of {describe(workload)}; "
                             f"valid: {valid}")
    return role


def _pick_tree(pod: Mapping, workload: Mapping, trees: Sequence[GroupTree], shape: WorkloadShape) -> GroupTree:
    if shape.kind.pod_gang is None:
        return trees[0]
    return trees[shape.kind.pod_gang(pod, workload, len(trees))]


def _workload_identity(pod: Mapping, workload: Mapping, topologies: Mapping[str, TopologyTree] | None,
                       trees: Sequence[GroupTree] | None = None,
                       shape: WorkloadShape | None = None) -> PodIdentity | None:
    trees = group_workload(workload, topologies) if trees is None else trees
    if not trees:
        return None
    shape = workload_shape(workload) if shape is None else shape
    tree = _pick_tree(pod, workload, trees, shape)
    role = _role_of(pod, workload, shape)
    index = (shape.kind.pod_index or index_of)(pod, role)
    warnings = list(tree.warnings)
    if index is None:      # interchangeable pods: the role's leaf, no particular slot
        slot = Slot(role.name, UNINDEXED)
        return PodIdentity(tree, tree.key, tree.name, slot, role.name, None, None, tree.topology, warnings)
    slot = Slot(role.name, index)
    try:
        leaf = tree.leaf_of(slot)
    except KeyError:
        leaf = tree.group(role.name)
        warnings.append(f"{describe(workload)}: pod {slot} is outside the {role.replicas} {role.name} pods "
                        f"the workload declares; it joins the {role.name} group without a segment")
        return PodIdentity(tree, tree.key, tree.name, slot, leaf.name, None, None, tree.topology, warnings)
    rank = None
    if leaf.segment is not None:
        rank = leaf.slots.index(slot)
    return PodIdentity(tree, tree.key, tree.name, slot, leaf.name, leaf.segment, rank, tree.topology, warnings)


def _podgroup_identity(pod: Mapping, podgroup: Mapping, pods: Sequence[Mapping],
                       topologies: Mapping[str, TopologyTree] | None, tree: GroupTree | None = None) -> PodIdentity:
    if not belongs(pod, podgroup):
        raise pod_error(pod, f"it names another PodGroup than {describe(podgroup)} (annotation "
                             f"{names.KAI_PODGROUP_ANNOTATION} / label {names.SP_PODGROUP_LABEL})")
    name = (pod.get("metadata") or {}).get("name")
    everyone = [p for p in pods if (p.get("metadata") or {}).get("name") != name] + [pod]
    tree = tree or group_podgroup(podgroup, everyone, topologies)
    leaf = pod_subgroup(pod, podgroup, tree)
    position = next(i for i, member in enumerate(leaf_pods(leaf, everyone, podgroup, tree)) if member is pod)
    return PodIdentity(tree, tree.key, tree.name, Slot(leaf, position), leaf, None, None, tree.topology,
                       list(tree.warnings))


def identify_pod(pod: Mapping, owner: Mapping, topologies: Mapping[str, TopologyTree] | None = None,
                 pods: Sequence[Mapping] = (), trees: Sequence[GroupTree] | None = None,
                 shape: WorkloadShape | None = None) -> PodIdentity | None:
    """The pod's role, index, leaf subgroup and segment; None when its workload does not opt in.

    `owner` is the workload (or PodGroup) the pod belongs to (see owner_of). For a PodGroup the index
    is the pod's position among its leaf's pods sorted by name: pass the PodGroup's other pods in `pods`.
    Raises GroupingError for invalid annotations or missing index labels. `trees` may pass the
    workload's group_workload(owner, topologies) computed earlier (the webhook caches it per owner),
    or for a PodGroup [group_podgroup(owner, pods and this pod, topologies)]; `shape`, its
    workload_shape(owner), likewise.
    """
    if is_podgroup(owner):
        return _podgroup_identity(pod, owner, pods, topologies, trees[0] if trees else None)
    return _workload_identity(pod, owner, topologies, trees, shape)
