"""What the offline tools need to know about a gang besides its tree: the request and usable nodes of
each role, which slots are mandatory, and a plain gang for workloads without topology annotations."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from topology.cluster import Cluster
from topology.groups import Group, GroupTree, RoleSpec, Slot
from topology.nodes import PodPlacementRules

GPU = "nvidia.com/gpu"


@dataclass
class RoleNeeds:
    request: np.ndarray                     # one pod's request, a row over cluster.resources
    usable: np.ndarray                      # bool mask over nodes
    unknown: list[str] = field(default_factory=list)    # requested resources no node offers


def role_needs(cluster: Cluster, tree: GroupTree) -> dict[str, RoleNeeds]:
    needs: dict[str, RoleNeeds] = {}
    for role in sorted({slot.role for slot in tree.slots()}):
        spec = tree.pod_spec(role)
        amounts = cluster.pod_demand(spec, tree.namespace)
        usable = cluster.usable(PodPlacementRules.from_spec(spec))
        claimed = cluster.claim_nodes(spec, tree.namespace)
        needs[role] = RoleNeeds(cluster.resources.vector(amounts), usable if claimed is None else usable & claimed,
                                cluster.resources.unknown(amounts))
    return needs


# --- mandatory and elastic slots -------------------------------------------------------------------

@dataclass(eq=False)
class Unit:
    """Elastic slots placed all together or not at all, only once the unit they need is placed."""

    slots: list[Slot]
    needs: "Unit | None" = None


def split_gang(group: Group) -> tuple[list[Slot], list[Unit]]:
    """The slots that must be placed (minMember / minSubGroup, recursively) and the elastic units,
    in tree order. A child beyond the first minSubGroup children is one unit of its own minimum,
    with its elastic slots depending on it."""
    if group.is_leaf:
        minimum = group.leaf_min()
        return list(group.slots[:minimum]), [Unit([slot]) for slot in group.slots[minimum:]]
    required_children = len(group.children) if group.min_subgroup is None else group.min_subgroup
    mandatory: list[Slot] = []
    optional: list[Unit] = []
    for position, child in enumerate(group.children):
        child_mandatory, child_optional = split_gang(child)
        if position < required_children:
            mandatory += child_mandatory
        else:
            head = Unit(child_mandatory) if child_mandatory else None
            if head is not None:
                optional.append(head)
            for unit in child_optional:
                if unit.needs is None:
                    unit.needs = head
        optional += child_optional
    if group.min_member is not None:
        _promote(mandatory, optional, group.min_member)
    return mandatory, optional


def _promote(mandatory: list[Slot], optional: list[Unit], minimum: int) -> None:
    """An inner group's minMember counts pods of the subtree: make elastic units mandatory until met."""
    promoted: set[int] = set()
    for unit in list(optional):
        if len(mandatory) >= minimum:
            return
        if unit.needs is None or id(unit.needs) in promoted:
            mandatory.extend(unit.slots)
            promoted.add(id(unit))
            optional.remove(unit)


# --- a plain gang for workloads that do not opt in ----------------------------------------------------

def plain_gang(namespace: str, name: str, kind: str, pods: Sequence[tuple[Slot, Mapping]]) -> GroupTree:
    """A gang of every pod, one child group per role, without topology constraints."""
    by_role: dict[str, list[Slot]] = {}
    specs: dict[str, Mapping] = {}
    for slot, spec in pods:
        by_role.setdefault(slot.role, []).append(slot)
        specs.setdefault(slot.role, spec)
    children = [Group(name=f"{name}/{role}", slots=sorted(slots)) for role, slots in by_role.items()]
    root = Group(name=name, children=children) if len(children) != 1 else \
        Group(name=name, slots=children[0].slots)
    roles = {role: RoleSpec(role, len(slots), specs[role]) for role, slots in by_role.items()}
    return GroupTree(namespace=namespace, name=name, kind=kind, root=root, roles=roles)
