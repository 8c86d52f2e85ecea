"""What the search needs to know about a gang and a topology, from the public models only: the levels
its whole gang may be confined to, the pods it must place per role (a lower bound, for screening), and
the domains of each level ("cluster" stands for the whole, level ROOT)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..groups import Group, GroupTree, Slot
from ..tree import TopologyTree

ROOT = -1


class Domains:
    def __init__(self, tree: TopologyTree | None, node_count: int):
        self.tree = tree
        self.member = tree.member.copy() if tree is not None else np.ones(node_count, dtype=bool)
        self.node_count = node_count

    def size(self, level: int) -> int:
        return 1 if level == ROOT else self.tree.domain_count(level)

    def owners(self, level: int) -> np.ndarray:
        """Every node's domain at `level` (-1 for nodes outside the topology)."""
        if level == ROOT:
            return np.where(self.member, 0, -1)
        return np.asarray(self.tree.node_domain[level], dtype=np.int64)

    def level_name(self, level: int) -> str:
        return "cluster" if level == ROOT else self.tree.levels[level].display

    def domain_id(self, level: int, domain: int) -> str:
        return "cluster" if level == ROOT else self.tree.domain_ids[level][domain]

    def domain_value(self, level: int, domain: int) -> str:
        return self.domain_id(level, domain).rsplit("/", 1)[-1]

    def level_of(self, name: str | None) -> int | None:
        if name is None or self.tree is None:
            return None
        return self.tree.level_index(name)


@dataclass
class Demand:
    required: int | None          # the root group's required level
    preferred: int | None         # its preferred level (dropped when coarser than the required one)
    need: dict[str, int]          # role -> pods the gang must place at least
    total: int

    @classmethod
    def of(cls, tree: GroupTree, domains: Domains, bound: Mapping[Slot, int]) -> "Demand":
        root = tree.root
        required, preferred = domains.level_of(root.required_level), domains.level_of(root.preferred_level)
        if required is not None and preferred is not None and preferred < required:
            preferred = None
        need = _need(root, bound)
        return cls(required, preferred, need, _total(root, bound))


def _need(group: Group, bound: Mapping[Slot, int]) -> dict[str, int]:
    """Per role, the fewest pods any way of meeting the gang's minimums must place."""
    if group.is_leaf:
        waiting = [slot for slot in group.slots if slot not in bound]
        running = len(group.slots) - len(waiting)
        counts: dict[str, int] = {}
        for slot in waiting[:max(0, group.leaf_min() - running)]:
            counts[slot.role] = counts.get(slot.role, 0) + 1
        return counts
    children = [_need(child, bound) for child in group.children]
    k = len(children) if group.min_subgroup is None else min(max(group.min_subgroup, 0), len(children))
    roles = {role for child in children for role in child}
    return {role: sum(sorted(child.get(role, 0) for child in children)[:k]) for role in sorted(roles)}


def _total(group: Group, bound: Mapping[Slot, int]) -> int:
    if group.is_leaf:
        waiting = sum(1 for slot in group.slots if slot not in bound)
        return max(0, group.leaf_min() - (len(group.slots) - waiting))
    totals = sorted(_total(child, bound) for child in group.children)
    k = len(totals) if group.min_subgroup is None else min(max(group.min_subgroup, 0), len(totals))
    return sum(totals[:k])
