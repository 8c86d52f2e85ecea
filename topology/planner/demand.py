"""What each group of a gang asks for: its levels resolved against the topology, the pods it must place
(the gang minimums, recursively), the nodes its running pods pin it to, and its segment shape. Slots
are numbered in tree order so the placer tracks them in arrays rather than dictionaries."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..groups import Group, GroupTree, Slot
from ..tree import LevelError
from .layout import ROOT, Layout

NO_IDS = np.empty(0, dtype=np.int64)


class PlanError(ValueError):
    """A gang that cannot be planned as written (unknown level, impossible minimum, bad bound slot)."""


@dataclass(frozen=True)
class SegmentShape:
    """Children that are alike leaves of one role confined to one level: counted as whole segments."""

    role: str
    size: int             # the pods of one segment (its mandatory pods)
    level: int
    count: int            # segments that must be placed
    hard: bool            # required (prunes candidates) rather than preferred
    short: int = 0        # pods of the one shorter segment that must be placed too (0: none)


@dataclass
class SlotTable:
    slots: list[Slot] = field(default_factory=list)        # every slot of the gang, in tree order
    index: dict[Slot, int] = field(default_factory=dict)
    bound: dict[int, int] = field(default_factory=dict)    # slot id -> node of a running pod


@dataclass(eq=False)
class GroupInfo:
    group: Group
    parent: GroupInfo | None
    children: list[GroupInfo] = field(default_factory=list)
    required: int | None = None
    preferred: int | None = None
    claim: int | None = None                 # the level of the exclusive domain
    ids: np.ndarray = field(default_factory=lambda: NO_IDS)      # slot ids of the subtree, tree order
    roles: frozenset = frozenset()           # roles of the subtree
    bound: int = 0                           # leaf: running slots
    mandatory: list[tuple[str, np.ndarray]] = field(default_factory=list)   # leaf: (role, slot ids) to place
    optional: list[tuple[str, np.ndarray]] = field(default_factory=list)    # leaf: elastic (role, slot ids)
    need: dict[str, int] = field(default_factory=dict)     # role -> pods to place, at least
    need_total: int = 0
    waiting: dict[str, int] = field(default_factory=dict)  # role -> pods of the subtree still to place
    k: int = 0                               # children that must be satisfied
    min_pods: int = 0                        # pods the subtree must count (running ones included)
    pinned: np.ndarray = field(default_factory=lambda: NO_IDS)  # nodes of running pods in the subtree
    segments: SegmentShape | None = None
    segmented_below: list[GroupInfo] = field(default_factory=list)   # descendants with required segments
    done: int | None = None                  # pods that count when running pods alone satisfy it
    position: int = 0                        # index among its parent's children

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def own_level(self) -> int | None:
        """The level at which the group asks for one domain: preferred, else required."""
        return self.preferred if self.preferred is not None else self.required

    def walk(self):
        """The subtree in pre-order (tree order), self first; one generator, not one per level."""
        stack = [self]
        while stack:
            group = stack.pop()
            yield group
            if group.children:
                stack.extend(reversed(group.children))

    def ancestors(self):
        node = self
        while node is not None:
            yield node
            node = node.parent


def resolve_level(layout: Layout, group: Group, name: str | None, what: str) -> int | None:
    if not name:
        return None
    if layout.tree is None:
        raise PlanError(f"group {group.name!r}: {what} level {name!r} needs a topology, but the gang names none")
    try:
        return layout.level_of(name)
    except LevelError as err:
        raise PlanError(f"group {group.name!r}: {what} level: {err}") from None


def analyse(tree: GroupTree, layout: Layout, bound: Mapping[Slot, int],
            requests: Mapping[str, np.ndarray]) -> tuple[GroupInfo, SlotTable]:
    """The GroupInfo tree and the slot numbering; PlanError on a gang that cannot be planned as written."""
    table = SlotTable()
    root = _analyse(tree.root, None, layout, bound, requests, table)
    return root, table


def _analyse(group: Group, parent: GroupInfo | None, layout: Layout, bound: Mapping[Slot, int],
             requests: Mapping[str, np.ndarray], table: SlotTable) -> GroupInfo:
    info = GroupInfo(group, parent)
    info.required = resolve_level(layout, group, group.required_level, "required")
    info.preferred = resolve_level(layout, group, group.preferred_level, "preferred")
    if info.required is not None and info.preferred is not None and info.preferred < info.required:
        info.preferred = None          # a preferred level above the required one adds nothing
    if group.exclusive:
        info.claim = info.required if info.required is not None else info.preferred
    if group.is_leaf:
        _leaf(info, bound, requests, table)
    else:
        info.children = [_analyse(child, info, layout, bound, requests, table) for child in group.children]
        for position, child in enumerate(info.children):
            child.position = position
        _inner(info)
    return info


def _leaf(info: GroupInfo, bound: Mapping[Slot, int], requests: Mapping[str, np.ndarray],
          table: SlotTable) -> None:
    group = info.group
    first = len(table.slots)
    slots = group.slots
    roles = dict.fromkeys(slot.role for slot in slots)
    for slot in ({slot.role: slot for slot in slots}.values() if not roles.keys() <= requests.keys() else ()):
        if slot.role not in requests:
            raise PlanError(f"group {group.name!r}: slot {slot} has role {slot.role!r} with no request; "
                            f"known roles: {', '.join(sorted(requests)) or 'none'}")
    numbered = dict(zip(slots, range(first, first + len(slots))))
    if len(numbered) != len(slots) or not table.index.keys().isdisjoint(numbered):
        twice = next(slot for position, slot in enumerate(slots)
                     if slot in table.index or numbered[slot] != first + position)
        raise PlanError(f"group {group.name!r}: slot {twice} appears twice in the gang")
    table.index.update(numbered)
    table.slots.extend(slots)
    running: list[int] = []
    if bound:
        waiting = []
        for slot, slot_id in numbered.items():
            node = bound.get(slot)
            if node is None:
                waiting.append(slot_id)
            else:
                table.bound[slot_id] = node
                running.append(node)
    else:
        waiting = list(range(first, first + len(slots)))
    info.ids = np.arange(first, len(table.slots), dtype=np.int64)
    info.roles = frozenset(roles)
    info.bound = len(running)
    to_place = max(0, group.leaf_min() - info.bound)
    if len(roles) == 1 and not running:      # the common leaf: one role, nothing running (no slot lookups)
        (role,) = roles
        info.mandatory = [(role, np.arange(first, first + to_place, dtype=np.int64))] if to_place else []
        rest = len(slots) - to_place
        info.optional = [(role, np.arange(first + to_place, first + len(slots), dtype=np.int64))] if rest else []
    else:
        info.mandatory = _by_role(table, waiting[:to_place])
        info.optional = _by_role(table, waiting[to_place:])
    info.need = {role: len(ids) for role, ids in info.mandatory}
    for role, ids in info.mandatory + info.optional:
        info.waiting[role] = info.waiting.get(role, 0) + len(ids)
    info.need_total = min(to_place, len(waiting))
    info.min_pods = group.leaf_min()
    info.pinned = np.unique(np.array(running, dtype=np.int64)) if running else NO_IDS
    info.done = info.bound if info.bound >= info.min_pods else None


def _by_role(table: SlotTable, ids: list[int]) -> list[tuple[str, np.ndarray]]:
    if ids and table.slots[ids[0]].role == table.slots[ids[-1]].role and \
            all(table.slots[i].role == table.slots[ids[0]].role for i in ids):
        return [(table.slots[ids[0]].role, np.array(ids, dtype=np.int64))]
    groups: dict[str, list[int]] = {}
    for slot_id in ids:
        groups.setdefault(table.slots[slot_id].role, []).append(slot_id)
    return [(role, np.array(members, dtype=np.int64)) for role, members in groups.items()]


def _inner(info: GroupInfo) -> None:
    group, children = info.group, info.children
    count = len(children)
    k = count if group.min_subgroup is None else group.min_subgroup
    if k < 0 or k > count:
        raise PlanError(f"group {group.name!r}: minSubGroup {k} is not between 0 and its {count} subgroups")
    info.k = k
    info.ids = np.concatenate([child.ids for child in children])
    info.roles = frozenset().union(*(child.roles for child in children))
    if group.min_member is not None and group.min_member > info.ids.size:
        raise PlanError(f"group {group.name!r}: minMember {group.min_member} exceeds its {info.ids.size} pods")
    for role in sorted({role for child in children for role in child.need}):
        info.need[role] = sum(sorted(child.need.get(role, 0) for child in children)[:k])
    for child in children:
        for role, count in child.waiting.items():
            info.waiting[role] = info.waiting.get(role, 0) + count
    running = sum(child.bound for child in info.walk() if child.is_leaf)
    info.min_pods = group.min_member or 0
    info.need_total = max(sum(sorted(child.need_total for child in children)[:k]), info.min_pods - running)
    pinned = [child.pinned for child in children if child.pinned.size]
    info.pinned = np.unique(np.concatenate(pinned)) if pinned else NO_IDS
    info.segments = _segment_shape(children, k)
    if k == len(children):           # every child is placed: so are their required segments
        info.segmented_below = [g for child in children for g in [child] + child.segmented_below
                                if g.segments is not None and g.segments.hard]
    done = [child.done for child in children if child.done is not None]
    if len(done) >= k and sum(done) >= info.min_pods:
        info.done = sum(done)


def _segment_shape(children: list[GroupInfo], k: int) -> SegmentShape | None:
    if not children or k == 0 or any(not child.is_leaf for child in children):
        return None
    roles = {role for child in children for role in child.need} or {None}
    levels = {child.required if child.required is not None else child.preferred for child in children}
    hard = all(child.required is not None for child in children)
    if len(roles) != 1 or len(levels) != 1 or None in roles or None in levels:
        return None
    (role,), (level,) = roles, levels
    sizes = [child.need_total for child in children]
    size = max(sizes)
    count = k - sum(1 for s in sizes if s < size)      # whichever k are chosen, this many are full size
    if size <= 0 or count <= 0:
        return None
    shorter = [s for s in sizes if 0 < s < size]
    short = shorter[0] if k == len(children) and len(shorter) == 1 else 0
    return SegmentShape(role, size, level, count, hard, short)


def required_ceiling(group: GroupInfo) -> int:
    """The finest required level of the group and its ancestors: its pods never leave that domain."""
    return max((g.required for g in group.ancestors() if g.required is not None), default=ROOT)
