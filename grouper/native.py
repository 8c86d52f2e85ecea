"""Native Kubernetes gangs -> group trees: `scheduling.k8s.io` PodGroups (v1alpha2 in v1.36, v1beta1 in
v1.37), the Workloads they come from and v1.37's CompositePodGroups.

A pod joins a PodGroup with `spec.schedulingGroup.podGroupName`. A PodGroup is a gang when
`spec.schedulingPolicy.gang.minCount` is set (`basic`: no gang); `spec.schedulingConstraints.topology[].key`
is a node label whose domain holds the whole group: the required level of the topology that has that label.

- One PodGroup on its own: a flat gang (slot i = the i-th member pod by name), as the scheduler-plugins one.
- The PodGroups of a Workload with several `podGroupTemplates`, or under a CompositePodGroup: one tree, one
  leaf per PodGroup (its minCount, its key), under the root composite (its minGroupCount, its key).
- A PodGroup whose workload opts in with our annotations (an Indexed Job with segments, that the Job
  controller put in a PodGroup of its own): the workload's tree, with the PodGroup's minimum and key laid on
  its root (see `constrain`), so both agree on one gang.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topology.dra_requests import podgroup_claims
from topology.groups import Group, GroupTree, RoleSpec, Slot
from topology.tree import TopologyTree

from .errors import GroupingError, describe
from .priority import class_priority

API_GROUP = "scheduling.k8s.io"
KINDS = ("PodGroup", "Workload", "CompositePodGroup")
TOPOLOGY_ENTRIES = 1                # v1.36 and v1.37 accept one schedulingConstraints.topology entry


def is_native(obj: Mapping) -> bool:
    """A scheduling.k8s.io PodGroup, Workload or CompositePodGroup (not KAI's or scheduler-plugins')."""
    return str(obj.get("apiVersion") or "").startswith(API_GROUP + "/") and obj.get("kind") in KINDS


def scheduling_group(pod: Mapping) -> str | None:
    """The PodGroup a pod names in spec.schedulingGroup.podGroupName."""
    group = (pod.get("spec") or {}).get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True)
class Policy:
    """What a native PodGroup (or CompositePodGroup) asks: a gang of `minimum` (pods, or child groups for a
    composite) or none (basic), inside one domain of the node label `key`."""

    gang: bool
    minimum: int | None = None
    key: str | None = None
    priority: int | None = None
    priority_class: str | None = None


def _field(obj: Mapping, path: str, value, valid: str) -> GroupingError:
    return GroupingError(f"{describe(obj)}: {path}={value!r} is invalid; {valid}")


def policy_of(obj: Mapping) -> Policy:
    """The policy of a native PodGroup or CompositePodGroup. Raises GroupingError naming the field."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise _field(obj, "spec", spec, "expected a mapping with schedulingPolicy")
    composite = obj.get("kind") == "CompositePodGroup"
    count_field = "minGroupCount" if composite else "minCount"
    policy = spec.get("schedulingPolicy") or {}
    if not isinstance(policy, Mapping) or ("gang" in policy) == ("basic" in policy):
        raise _field(obj, "spec.schedulingPolicy", policy, f"set exactly one of basic or gang.{count_field}")
    minimum = None
    if "gang" in policy:
        minimum = (policy.get("gang") or {}).get(count_field)
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
            raise _field(obj, f"spec.schedulingPolicy.gang.{count_field}", minimum, "expected an integer >= 1")
    constraints = (spec.get("schedulingConstraints") or {}).get("topology") or []
    if not isinstance(constraints, list) or len(constraints) > TOPOLOGY_ENTRIES:
        raise _field(obj, "spec.schedulingConstraints.topology", constraints,
                     f"expected a list of at most {TOPOLOGY_ENTRIES} entry with a key (a node label)")
    key = None
    if constraints:
        key = constraints[0].get("key") if isinstance(constraints[0], Mapping) else None
        if not isinstance(key, str) or not key:
            raise _field(obj, "spec.schedulingConstraints.topology[0].key", key, "expected a node label key")
    priority = spec.get("priority")
    return Policy("gang" in policy, minimum, key,
                  priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
                  spec.get("priorityClassName") or None)


def workload_name(podgroup: Mapping) -> str | None:
    """The Workload a PodGroup was made from: v1beta1 spec.workloadRef, v1alpha2 spec.podGroupTemplateRef."""
    spec = podgroup.get("spec") or {}
    ref = spec.get("workloadRef") or (spec.get("podGroupTemplateRef") or {}).get("workload") or {}
    return ref.get("workloadName") if isinstance(ref, Mapping) else None


def parent_name(obj: Mapping) -> str | None:
    """The CompositePodGroup a PodGroup or CompositePodGroup sits in (v1.37)."""
    return (obj.get("spec") or {}).get("parentCompositePodGroupName") or None


def templates(workload: Mapping) -> int:
    """How many PodGroup templates (or composite templates) a Workload declares."""
    spec = workload.get("spec") or {}
    return len(spec.get("podGroupTemplates") or []) + len(spec.get("compositePodGroupTemplates") or [])


def controller_ref(workload: Mapping) -> tuple[str, str, str] | None:
    """(api group, Kind, name) of the object a Workload names in spec.controllerRef."""
    ref = (workload.get("spec") or {}).get("controllerRef") or {}
    if not isinstance(ref, Mapping) or not ref.get("kind") or not ref.get("name"):
        return None
    return str(ref.get("apiGroup") or ""), str(ref["kind"]), str(ref["name"])


# --- levels --------------------------------------------------------------------------------------

def key_level(obj: Mapping, path: str, key: str, topologies: Mapping[str, TopologyTree]) -> str:
    """The topology whose levels have the node label `key` (the first by name). GroupingError otherwise:
    the gang could not be kept inside one domain of it."""
    for name in sorted(topologies):
        if _has_key(topologies[name], key):
            return name
    known = sorted({level.key for tree in topologies.values() for level in tree.levels})
    raise GroupingError(f"{describe(obj)}: {path}={key!r} is a node label no topology has as a level, so the "
                        f"gang cannot be kept inside one {key} domain; valid keys: {', '.join(known) or 'none (no topology defined)'}")


def _one_topology(objs: Sequence[tuple[Mapping, Policy]], topologies: Mapping[str, TopologyTree]) -> str | None:
    """The topology of every key in a tree (the planner places a tree in one topology)."""
    keyed = [(obj, policy.key) for obj, policy in objs if policy.key]
    if not keyed:
        return None
    for name in sorted(topologies):
        if all(_has_key(topologies[name], key) for _, key in keyed):
            return name
    for obj, key in keyed:          # names the first key no topology has
        key_level(obj, "spec.schedulingConstraints.topology[0].key", key, topologies)
    listed = ", ".join(f"{describe(obj)} key {key!r}" for obj, key in keyed)
    raise GroupingError(f"{listed}: no single topology has all of these node labels as levels")


def _has_key(topology: TopologyTree, key: str) -> bool:
    """Whether `key` is the node label of one of the topology's levels (native keys are labels, not aliases)."""
    return sum(level.key == key for level in topology.levels) == 1


# --- trees ---------------------------------------------------------------------------------------

def _name(obj: Mapping) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _member_pods(podgroup: Mapping, pods: Sequence[Mapping]) -> list[Mapping]:
    members = [p for p in pods if scheduling_group(p) == _name(podgroup)]
    return sorted(members, key=lambda p: str((p.get("metadata") or {}).get("name") or ""))


def _leaf(podgroup: Mapping, policy: Policy, pods: Sequence[Mapping], tree: GroupTree, warnings: list[str]) -> Group:
    members = _member_pods(podgroup, pods)
    name = _name(podgroup)
    if members:
        metadata = members[0].get("metadata") or {}
        spec = podgroup_claims(podgroup, members[0].get("spec") or {})        # the PodGroup's claims: shared
        if (podgroup.get("spec") or {}).get("resourceClaims"):
            tree.podgroup_claims[name] = podgroup
        tree.roles[name] = RoleSpec(name, len(members), spec, metadata.get("labels") or {})
    if policy.minimum is not None and len(members) < policy.minimum:
        warnings.append(f"{describe(podgroup)}: {len(members)} pods of its minCount {policy.minimum} exist; "
                        f"the gang waits for the rest")
    return Group(name=name, slots=[Slot(name, i) for i in range(len(members))],
                 min_member=policy.minimum, required_level=policy.key)


def group_priority(policy: Policy, classes: Sequence[Mapping]) -> tuple[int, str] | None:
    """(priority, preemption policy) a PodGroup or CompositePodGroup sets itself: spec.priority, else its
    priorityClassName's value; None when it sets neither (its pods' priority counts then)."""
    if policy.priority is not None:
        return policy.priority, "PreemptLowerPriority"
    if policy.priority_class:
        return class_priority({"priorityClassName": policy.priority_class}, classes)
    return None


def _priority(tree: GroupTree, policies: Sequence[Policy], classes: Sequence[Mapping]) -> None:
    """PodGroup spec.priority, else its priorityClassName's value, else the member pods' priority."""
    for policy in policies:
        resolved = group_priority(policy, classes)
        if resolved is not None:
            tree.priority, tree.preemption_policy = resolved
            tree.priority_from_group = True
            return
    spec = next(iter(tree.roles.values())).pod_spec if tree.roles else {}
    if isinstance(spec.get("priority"), int):
        tree.priority = spec["priority"]
    tree.preemption_policy = spec.get("preemptionPolicy") or tree.preemption_policy


def group_native(podgroup: Mapping, pods: Sequence[Mapping], topologies: Mapping[str, TopologyTree],
                 classes: Sequence[Mapping] = ()) -> GroupTree | None:
    """The gang of one native PodGroup and the pods naming it; None for a `basic` PodGroup (no gang)."""
    policy = policy_of(podgroup)
    if not policy.gang:
        return None
    topology = _one_topology([(podgroup, policy)], topologies)
    metadata = podgroup.get("metadata") or {}
    warnings: list[str] = []
    tree = GroupTree(namespace=metadata.get("namespace") or "default", name=_name(podgroup), kind="PodGroup",
                     root=Group(name=_name(podgroup)), topology=topology, warnings=warnings,
                     workload=_name(podgroup))
    tree.root = _leaf(podgroup, policy, pods, tree, warnings)
    _priority(tree, [policy], classes)
    return tree


def group_native_tree(name: str, namespace: str, podgroups: Sequence[Mapping], composites: Sequence[Mapping],
                      pods: Sequence[Mapping], topologies: Mapping[str, TopologyTree],
                      classes: Sequence[Mapping] = ()) -> GroupTree:
    """One gang of several native PodGroups: the PodGroups of one Workload (`composites` empty: under a
    root named `name`, every PodGroup required), or a tree of CompositePodGroups (the one without a parent
    is the root) with the PodGroups as leaves. `basic` PodGroups join as leaves without a minimum."""
    policies = {id(obj): policy_of(obj) for obj in [*podgroups, *composites]}
    everything = [(obj, policies[id(obj)]) for obj in [*composites, *podgroups]]
    topology = _one_topology(everything, topologies)
    warnings: list[str] = []
    tree = GroupTree(namespace=namespace, name=name, kind="Workload", root=Group(name=name), topology=topology,
                     warnings=warnings, workload=name)
    leaves = {_name(pg): _leaf(pg, policies[id(pg)], pods, tree, warnings) for pg in podgroups}
    groups: dict[str, Group] = {}
    for composite in composites:
        policy = policies[id(composite)]
        groups[_name(composite)] = Group(name=_name(composite), min_subgroup=policy.minimum if policy.gang else None,
                                         required_level=policy.key)
    roots = [c for c in composites if parent_name(c) not in groups]
    if composites and len(roots) != 1:
        raise GroupingError(f"CompositePodGroups {', '.join(_name(c) for c in roots) or 'none'} in {namespace} have "
                            f"no parent: a tree has one root CompositePodGroup")
    root = groups[_name(roots[0])] if composites else tree.root
    for obj in [*composites, *podgroups]:
        if obj in roots:
            continue
        group = groups.get(_name(obj)) if obj.get("kind") == "CompositePodGroup" else leaves[_name(obj)]
        parent = groups.get(parent_name(obj) or "", root)
        parent.children.append(group)
    for group in groups.values():
        if group.min_subgroup is not None and group.min_subgroup > len(group.children):
            warnings.append(f"CompositePodGroup {namespace}/{group.name}: minGroupCount {group.min_subgroup} is "
                            f"above its {len(group.children)} child groups; the gang waits for the rest")
            group.min_subgroup = len(group.children) or None
    tree.root = root
    _priority(tree, [policies[id(obj)] for obj in [*composites, *podgroups]], classes)
    return tree


def constrain(tree: GroupTree, podgroup: Mapping, topologies: Mapping[str, TopologyTree]) -> GroupTree:
    """A workload's own tree (our annotations) inside the native PodGroup its pods name: the root also
    needs the PodGroup's minCount and its key's domain. Keys nest, so the finer required level of the two
    holds both; a key in another topology than the workload's is an error."""
    policy = policy_of(podgroup)
    if not policy.gang:
        return tree
    if policy.key:
        topology = key_level(podgroup, "spec.schedulingConstraints.topology[0].key", policy.key, topologies)
        if tree.topology and tree.topology != topology:
            if tree.topology not in topologies or not _has_key(topologies[tree.topology], policy.key):
                raise GroupingError(f"{describe(podgroup)}: spec.schedulingConstraints.topology[0].key="
                                    f"{policy.key!r} is not a level of topology {tree.topology!r}, which "
                                    f"{tree.kind} {tree.namespace}/{tree.workload} names")
            topology = tree.topology
        tree.topology = tree.topology or topology
        ours = tree.root.required_level
        levels = topologies[tree.topology]
        if ours is None or levels.level_index(policy.key) > levels.level_index(ours):
            tree.root.required_level = policy.key
    total = len(tree.slots())
    if policy.minimum is not None:
        if policy.minimum > total:
            tree.warnings.append(f"{describe(podgroup)}: spec.schedulingPolicy.gang.minCount={policy.minimum} "
                                 f"is above the {total} pods {tree.kind} {tree.namespace}/{tree.workload} "
                                 f"declares; kube-scheduler holds its pods for good")
        elif tree.root.min_member is not None and tree.root.min_member != policy.minimum:
            tree.warnings.append(f"{describe(podgroup)}: minCount {policy.minimum} differs from the gang's minimum "
                                 f"{tree.root.min_member}; the larger one holds")
            tree.root.min_member = max(tree.root.min_member, policy.minimum)
    return tree


def possible_pods(workload: Mapping) -> int | None:
    """The pods a workload can have at once, when it says: a Job's parallelism (1 when unset)."""
    if workload.get("kind") != "Job":
        return None
    parallelism = (workload.get("spec") or {}).get("parallelism", 1)
    return parallelism if isinstance(parallelism, int) and not isinstance(parallelism, bool) else None


def problems(podgroup: Mapping, topologies: Mapping[str, TopologyTree], possible: int | None = None) -> list[str]:
    """What is wrong with a native PodGroup as we would place it (for the webhook's warnings and
    /debug/plans): an invalid policy, a key no topology has, a minCount above the pods that can ever exist
    (`possible`, when a workload says how many)."""
    try:
        policy = policy_of(podgroup)
        if policy.key:
            key_level(podgroup, "spec.schedulingConstraints.topology[0].key", policy.key, topologies)
    except GroupingError as error:
        return [str(error)]
    if policy.minimum is not None and possible is not None and policy.minimum > possible:
        return [f"{describe(podgroup)}: spec.schedulingPolicy.gang.minCount={policy.minimum} is above the "
                f"{possible} pods its workload can ever have; kube-scheduler holds them for good"]
    return []


def native_identity(pod: Mapping, tree: GroupTree, pods: Sequence[Mapping], owner: tuple | None = None):
    """The pod's slot in a native tree: its PodGroup's leaf, at its position among that PodGroup's pods
    (`pods`, this one included) by name. A PodGroup's pods are interchangeable: the position is only the
    slot the pod prefers while it is free."""
    from .identity import PodIdentity            # identity imports the grouper's other modules

    leaf = scheduling_group(pod) or ""
    metadata = pod.get("metadata") or {}
    name = str(metadata.get("name") or "")
    try:
        tree.group(leaf)
    except KeyError:
        raise GroupingError(f"Pod {metadata.get('namespace') or 'default'}/{name}: its PodGroup {leaf!r} is not "
                            f"part of gang {tree.key}") from None
    names = [str((p.get("metadata") or {}).get("name") or "") for p in pods if scheduling_group(p) == leaf]
    position = sorted(names).index(name) if name in names else 0
    return PodIdentity(tree, tree.key, tree.name, Slot(leaf, position), leaf, None, None, tree.topology,
                       list(tree.warnings), owner)


# --- the native gate for our own gangs ------------------------------------------------------------

MANAGED_BY = "app.kubernetes.io/managed-by"
GATE_MANAGER = "tas-extender"


def is_gate(podgroup: Mapping) -> bool:
    """A PodGroup the extender made to gate one of its own gangs (its placement stays ours)."""
    return ((podgroup.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == GATE_MANAGER


def gang_minimum(tree: GroupTree) -> int:
    """The pods a gang needs before it can be placed: the root's minimum, else each group's (a leaf's
    minMember or all its slots; an inner group's smallest `min_subgroup` children), at least 1."""
    def need(group: Group) -> int:
        if group.min_member is not None:
            return group.min_member
        if group.is_leaf:
            return len(group.slots)
        needs = sorted(need(child) for child in group.children)
        return sum(needs[:group.min_subgroup] if group.min_subgroup is not None else needs)
    return max(1, need(tree.root))


def gate_podgroup(name: str, namespace: str, minimum: int, owner: Mapping | None, version: str) -> dict:
    """The native PodGroup that gates a gang of ours: kube-scheduler's PreEnqueue holds its pods until
    `minimum` exist. No topology constraint (the placement is ours); owned by the workload (collected with it)."""
    metadata: dict = {"name": name, "namespace": namespace, "labels": {MANAGED_BY: GATE_MANAGER}}
    owner_meta = (owner or {}).get("metadata") or {}
    if owner_meta.get("uid") and owner_meta.get("name"):
        metadata["ownerReferences"] = [{"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"),
                                        "name": owner_meta["name"], "uid": owner_meta["uid"]}]
    return {"apiVersion": f"{API_GROUP}/{version}", "kind": "PodGroup", "metadata": metadata,
            "spec": {"schedulingPolicy": {"gang": {"minCount": minimum}}}}
