"""Explicit PodGroups -> group trees.

KAI `scheduling.run.ai/v2alpha2`: minMember, minSubGroup, topologyConstraint and a flat list of
subGroups linked by `parent` into a tree; pods join with the `pod-group-name` annotation and the
`kai.scheduler/subgroup-name` label naming a leaf. scheduler-plugins `scheduling.x-k8s.io/v1alpha1`:
a flat gang of `minMember` pods labelled `scheduling.x-k8s.io/pod-group`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topology.groups import Group, GroupTree, RoleSpec, Slot
from topology.tree import TopologyTree

from . import names
from .errors import GroupingError, describe
from .levels import LevelRef, check_not_coarser, find_topology, level_index


@dataclass
class SubGroupSpec:
    name: str
    field: str                       # "spec" for the root, "spec.subGroups[2]" for a subgroup
    parent: str | None = None
    min_member: int | None = None
    min_subgroup: int | None = None
    topology: str | None = None
    required: LevelRef | None = None
    preferred: LevelRef | None = None
    children: list[str] = field(default_factory=list)


def is_podgroup(obj: Mapping) -> bool:
    return obj.get("kind") == "PodGroup"


def _is_scheduler_plugins(podgroup: Mapping) -> bool:
    return str(podgroup.get("apiVersion") or "").startswith(names.SP_PODGROUP_API.split("/")[0] + "/")


def _name(podgroup: Mapping) -> str:
    return str((podgroup.get("metadata") or {}).get("name") or "")


def _error(podgroup: Mapping, group: str, message: str) -> GroupingError:
    return GroupingError(f"{describe(podgroup)}: group {group!r}: {message}")


# --- parsing -------------------------------------------------------------------------------------

def _positive(podgroup: Mapping, group: str, path: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _error(podgroup, group, f"{path}={value!r} is invalid; expected an integer > 0 (or unset)")
    return value


def _spec_of(podgroup: Mapping, raw: Mapping, name: str, path: str) -> SubGroupSpec:
    min_member = _positive(podgroup, name, f"{path}.minMember", raw.get("minMember"))
    min_subgroup = _positive(podgroup, name, f"{path}.minSubGroup", raw.get("minSubGroup"))
    if min_member is not None and min_subgroup is not None:
        raise _error(podgroup, name, f"{path}.minMember and {path}.minSubGroup are mutually exclusive; "
                                     f"set minMember on a leaf group, minSubGroup on a group with subgroups")
    constraint = raw.get("topologyConstraint") or {}
    where = f"{path}.topologyConstraint"
    if not isinstance(constraint, Mapping):
        raise _error(podgroup, name, f"{where}={constraint!r} is invalid; expected a mapping with topology, "
                                     f"requiredTopologyLevel and preferredTopologyLevel")
    required, preferred = constraint.get("requiredTopologyLevel"), constraint.get("preferredTopologyLevel")
    return SubGroupSpec(
        name=name, field=path, parent=raw.get("parent") or None, min_member=min_member, min_subgroup=min_subgroup,
        topology=constraint.get("topology") or None,
        required=LevelRef(str(required), f"{where}.requiredTopologyLevel") if required else None,
        preferred=LevelRef(str(preferred), f"{where}.preferredTopologyLevel") if preferred else None)


def _parse(podgroup: Mapping) -> tuple[SubGroupSpec, dict[str, SubGroupSpec]]:
    spec = podgroup.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise _error(podgroup, _name(podgroup), f"spec={spec!r:.60} is invalid; expected a mapping "
                                                f"(minMember, subGroups, topologyConstraint)")
    root = _spec_of(podgroup, spec, _name(podgroup), "spec")
    if _is_scheduler_plugins(podgroup):
        return root, {}
    subgroups: dict[str, SubGroupSpec] = {}
    raw_subgroups = spec.get("subGroups") or []
    if not isinstance(raw_subgroups, list):
        raise _error(podgroup, _name(podgroup), "spec.subGroups must be a list of subgroups "
                                                "(each with name, parent, minMember or minSubGroup)")
    for i, raw in enumerate(raw_subgroups):
        path = f"spec.subGroups[{i}]"
        if not isinstance(raw, Mapping):
            raise _error(podgroup, path, f"{path}={raw!r} is invalid; expected a mapping with a name")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise _error(podgroup, path, f"{path}.name is missing; every subgroup needs a unique name")
        if name in subgroups:
            raise _error(podgroup, name, f"{path}.name={name!r} is a duplicate of "
                                         f"{subgroups[name].field}.name; subgroup names must be unique")
        subgroups[name] = _spec_of(podgroup, raw, name, path)
    return root, subgroups


# --- structure checks ----------------------------------------------------------------------------

def _link(podgroup: Mapping, root: SubGroupSpec, subgroups: dict[str, SubGroupSpec]) -> None:
    for group in subgroups.values():
        if group.parent is None:
            root.children.append(group.name)
        elif group.parent not in subgroups:
            valid = ", ".join(subgroups) or "none"
            raise _error(podgroup, group.name, f"{group.field}.parent={group.parent!r} names no subgroup; "
                                               f"valid parents: {valid} (or unset for the top level)")
        else:
            subgroups[group.parent].children.append(group.name)
    for group in subgroups.values():
        seen = [group.name]
        parent = group.parent
        while parent is not None:
            if parent in seen:
                cycle = " -> ".join(seen + [parent])
                raise _error(podgroup, group.name, f"{group.field}.parent forms a cycle ({cycle}); "
                                                   f"parents must lead up to the top level")
            seen.append(parent)
            parent = subgroups[parent].parent


def _check_minimums(podgroup: Mapping, group: SubGroupSpec, is_root: bool) -> None:
    if group.children:
        if group.min_member is not None and not is_root:
            raise _error(podgroup, group.name, f"{group.field}.minMember is set on a group with subgroups "
                                               f"({', '.join(group.children)}); use minSubGroup there")
        if group.min_subgroup is not None and group.min_subgroup > len(group.children):
            raise _error(podgroup, group.name, f"{group.field}.minSubGroup={group.min_subgroup} exceeds its "
                                               f"{len(group.children)} direct subgroups; valid: 1 to "
                                               f"{len(group.children)}")
    elif group.min_subgroup is not None:
        raise _error(podgroup, group.name, f"{group.field}.minSubGroup is set on a leaf group (no subgroups); "
                                           f"use minMember there")


def _ancestors(group: SubGroupSpec, root: SubGroupSpec, subgroups: dict[str, SubGroupSpec]) -> list[SubGroupSpec]:
    chain, parent = [], group.parent
    while parent is not None:
        chain.append(subgroups[parent])
        parent = subgroups[parent].parent
    return chain + [root]


def _topology_name(podgroup: Mapping, root: SubGroupSpec, subgroups: dict[str, SubGroupSpec]) -> str | None:
    named = {g.topology: g for g in [root, *subgroups.values()] if g.topology}
    if len(named) > 1:
        listed = ", ".join(f"{g.field}.topologyConstraint.topology={t!r}" for t, g in named.items())
        raise _error(podgroup, root.name, f"subgroups name different topologies ({listed}); a PodGroup is "
                                          f"placed in one topology")
    return next(iter(named), None)


def _check_levels(podgroup: Mapping, root: SubGroupSpec, subgroups: dict[str, SubGroupSpec],
                  topology: str | None, topologies: Mapping[str, TopologyTree] | None, warnings: list[str]) -> None:
    groups = [root, *subgroups.values()]
    if topology is None:
        levels = [g for g in groups if g.required or g.preferred]
        if levels:
            warnings.append(f"{describe(podgroup)}: topology levels of {', '.join(g.name for g in levels)} ignored: "
                            f"no topologyConstraint.topology names the topology")
            for g in levels:
                g.required = g.preferred = None
        return
    if topologies is None:
        return
    source = next(f"{g.field}.topologyConstraint.topology" for g in groups if g.topology)
    tree = find_topology(podgroup, topology, source, topologies)
    for g in groups:
        for ref in (g.required, g.preferred):
            if ref is not None:
                level_index(podgroup, tree, ref)
    for g in subgroups.values():
        for outer in _ancestors(g, root, subgroups):
            check_not_coarser(podgroup, tree, g.required, outer.required, f"group {outer.name!r}'s required level")


def _validated(podgroup: Mapping, topologies: Mapping[str, TopologyTree] | None
               ) -> tuple[SubGroupSpec, dict[str, SubGroupSpec], str | None, list[str]]:
    if not is_podgroup(podgroup):
        raise GroupingError(f"{describe(podgroup)}: not a PodGroup (kind={podgroup.get('kind')!r})")
    root, subgroups = _parse(podgroup)
    _link(podgroup, root, subgroups)
    _check_minimums(podgroup, root, is_root=True)
    for group in subgroups.values():
        _check_minimums(podgroup, group, is_root=False)
    warnings: list[str] = []
    topology = _topology_name(podgroup, root, subgroups)
    _check_levels(podgroup, root, subgroups, topology, topologies, warnings)
    return root, subgroups, topology, warnings


def validate_podgroup(podgroup: Mapping, topologies: Mapping[str, TopologyTree] | None = None) -> list[str]:
    """Check a PodGroup on its own (no pods needed). Returns warnings; raises GroupingError."""
    return _validated(podgroup, topologies)[3]


# --- pods ----------------------------------------------------------------------------------------

def belongs(pod: Mapping, podgroup: Mapping) -> bool:
    """False for a pod that names another PodGroup (pods naming none are taken as given)."""
    metadata = pod.get("metadata") or {}
    if _is_scheduler_plugins(podgroup):
        named = (metadata.get("labels") or {}).get(names.SP_PODGROUP_LABEL)
    else:
        named = (metadata.get("annotations") or {}).get(names.KAI_PODGROUP_ANNOTATION)
    return named is None or named == _name(podgroup)


def pod_subgroup(pod: Mapping, podgroup: Mapping, tree: GroupTree) -> str:
    """The leaf group a pod of the PodGroup joins (the root for a flat gang)."""
    if tree.root.is_leaf:
        return tree.root.name
    metadata = pod.get("metadata") or {}
    value = (metadata.get("labels") or {}).get(names.KAI_SUBGROUP_LABEL)
    leaves = [g.name for g in tree.groups() if g.is_leaf and g is not tree.root]
    if value not in leaves:
        pod_name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
        problem = " is missing" if value is None else f"={value!r} names no leaf subgroup"
        raise GroupingError(f"Pod {metadata.get('namespace') or 'default'}/{pod_name}: label "
                            f"{names.KAI_SUBGROUP_LABEL}{problem} of {describe(podgroup)}; "
                            f"valid: {', '.join(leaves)}")
    return value


def leaf_pods(leaf: str, pods: Sequence[Mapping], podgroup: Mapping, tree: GroupTree) -> list[Mapping]:
    members = [p for p in pods if belongs(p, podgroup) and pod_subgroup(p, podgroup, tree) == leaf]
    return sorted(members, key=lambda p: str((p.get("metadata") or {}).get("name") or ""))


# --- building ------------------------------------------------------------------------------------

def _group(spec: SubGroupSpec, subgroups: dict[str, SubGroupSpec]) -> Group:
    return Group(name=spec.name, children=[_group(subgroups[c], subgroups) for c in spec.children],
                 min_member=spec.min_member, min_subgroup=spec.min_subgroup,
                 required_level=spec.required.value if spec.required else None,
                 preferred_level=spec.preferred.value if spec.preferred else None)


def group_podgroup(podgroup: Mapping, pods: Sequence[Mapping],
                   topologies: Mapping[str, TopologyTree] | None = None) -> GroupTree:
    """The gang of an explicit PodGroup and its pods: slot (leaf, i) is the i-th pod of the leaf by name."""
    root, subgroups, topology, warnings = _validated(podgroup, topologies)
    tree = GroupTree(namespace=(podgroup.get("metadata") or {}).get("namespace") or "default",
                     name=_name(podgroup), kind="PodGroup", root=_group(root, subgroups), topology=topology,
                     warnings=warnings, workload=_name(podgroup))
    first_spec: Mapping | None = None
    for leaf in [g for g in tree.groups() if g.is_leaf]:
        members = leaf_pods(leaf.name, pods, podgroup, tree)
        leaf.slots = [Slot(leaf.name, i) for i in range(len(members))]
        if members:
            spec = members[0].get("spec") or {}
            labels = (members[0].get("metadata") or {}).get("labels") or {}
            tree.roles[leaf.name] = RoleSpec(leaf.name, len(members), spec, labels)
            first_spec = first_spec or spec
        if leaf.min_member is not None and len(members) < leaf.min_member:
            warnings.append(f"{describe(podgroup)}: group {leaf.name!r} has {len(members)} pods of its "
                            f"minMember {leaf.min_member}; the gang waits for the rest")
    if first_spec is not None:
        if isinstance(first_spec.get("priority"), int):
            tree.priority = first_spec["priority"]
        tree.preemption_policy = first_spec.get("preemptionPolicy") or tree.preemption_policy
    return tree
