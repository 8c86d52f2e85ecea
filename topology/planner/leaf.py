"""A leaf's mandatory pods in a domain (the Placer's leaf fill).

A leaf fills the tightest nodes that hold its pods (fill.py), keeping clear of the room its placed
siblings' elastic pods will take in their own domains when it can, or, in a domain exact packing
allotted it (siblings.py), where that packing puts them. When what comes after fails, the leaf refills
a few times with one node of the first fill left out or holding one pod fewer: a later group may need
exactly that room."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .demand import GroupInfo, required_ceiling
from .fill import select
from .packing import fill_packed
from .state import NO_SLOTS

LEAF_VARIANTS = 6            # refills of a leaf holding back room its first fill used, while searching
Then = Callable[[], bool]


class LeafFill:
    """Mixed into Placer: uses its state, layout, policy, search budget and bookkeeping."""

    def _place_leaf(self, group: GroupInfo, level: int, domain: int, then: Then) -> bool:
        """Fill the leaf's pods into the domain, then `then`. When that fails, refill with one node of
        the first fill left out, or holding one pod fewer (a later group may need exactly that room),
        a few times while the search budget lasts."""
        variants: list[tuple[str, int, bool]] = []
        for attempt in range(1 + LEAF_VARIANTS):
            if attempt:
                if attempt > len(variants) or not self.searching:
                    return False
                self.tried += 1
            mark = self.state.mark()
            if attempt:
                role, node, avoid = variants[attempt - 1]
                self._hold_back(role, node, avoid)
            placed = self._fill_leaf(group, level, domain)
            if attempt:
                self._hold_back(role, node, avoid, undo=True)
            if placed and then():
                return True
            if not attempt and placed and group.mandatory:
                variants = self._variants(group)
            self.state.revert(mark)
            if not placed and not attempt:
                return False
        return False

    def _variants(self, group: GroupInfo) -> list[tuple[str, int, bool]]:
        """(role, node, leave the node out entirely?) for each node the first fill used."""
        variants = []
        for role, ids in group.mandatory:
            nodes, pods = np.unique(self.state.node_of[ids], return_counts=True)
            for node, count in zip(nodes.tolist(), pods.tolist()):
                variants.append((role, node, True))
                if count > 1:
                    variants.append((role, node, False))
        return variants

    def _hold_back(self, role: str, node: int, avoid: bool, undo: bool = False) -> None:
        """Hide the node from the fill, or take the room of one pod of `role` from it (a phantom pod)."""
        nodes = np.array([node], dtype=np.int64)
        if avoid:
            if undo:
                self.state.block(self._hidden, False)
            else:
                self._hidden = self.state.block(nodes)
        else:
            self.state.place(role, nodes, np.array([-1 if undo else 1], dtype=np.int64), NO_SLOTS)

    def _fill_leaf(self, group: GroupInfo, level: int, domain: int) -> bool:
        """The leaf's mandatory pods, keeping clear of the room its placed siblings' elastic pods will
        take in their own domains when that is possible (the tightest nodes are often exactly that);
        in the domain exact packing allotted it, where that packing puts them."""
        mark = self.state.mark()
        if self.pack_targets.get(group) == (level, domain):
            shared = [leaf for leaf, target in self.pack_targets.items() if target == (level, domain)]
            if fill_packed(self.state, group, level, domain, shared):
                return True
        held = self._hold_for_siblings(group, level, domain)
        if held:
            placed = self._fill(group, level, domain)
            for role, nodes, pods in held:
                self.state.place(role, nodes, -pods, NO_SLOTS)
            if placed:
                return True
            self.state.revert(mark)
        return self._fill(group, level, domain)

    def _hold_for_siblings(self, group: GroupInfo, level: int,
                           domain: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Room held for the elastic pods of the leaf's placed siblings, inside their own domains (those
        that meet the domain being filled)."""
        if group.parent is None:
            return []
        held = []
        for sibling in self._elastic_leaves(group.parent):
            if sibling is group or sibling not in self.where or sibling in self.frozen:
                continue
            home, around = self._home(sibling)
            if not self._meet(level, domain, home, around):
                continue
            for role, ids in sibling.optional:
                waiting = int(np.count_nonzero(self.state.node_of[ids] < 0))
                if waiting:
                    nodes, pods = select(self.state, role, home, around, waiting, self.policy, partial=True)
                    if pods.size:
                        self.state.place(role, nodes, pods, NO_SLOTS)
                        held.append((role, nodes, pods))
        return held

    def _elastic_leaves(self, group: GroupInfo) -> list[GroupInfo]:
        """The group's children that are leaves with elastic pods (kept: asked at every leaf fill)."""
        found = self._elastic_children.get(group)
        if found is None:
            found = self._elastic_children[group] = [child for child in group.children
                                                     if child.is_leaf and child.optional]
        return found

    def _meet(self, level: int, domain: int, other_level: int, other: int) -> bool:
        """Whether two domains overlap: one lies inside the other."""
        if level < other_level:
            level, domain, other_level, other = other_level, other, level, domain
        return other_level < 0 or int(self.layout.ancestors(level, other_level)[domain]) == other

    def _home(self, leaf: GroupInfo) -> tuple[int, int]:
        """The leaf's own domain: of the level it asked for, around the domain it was placed in."""
        level, domain = self.where[leaf]
        home = self._home_level(leaf, level, required_ceiling(leaf))
        return home, (int(self.layout.ancestors(level, home)[domain]) if home >= 0 else 0)

    def _fill(self, group: GroupInfo, level: int, domain: int) -> bool:
        for role, ids in group.mandatory:
            chosen = select(self.state, role, level, domain, len(ids), self.policy)
            if chosen is None:
                return False
            self.state.place(role, chosen[0], chosen[1], ids)
        return True

    def _forget(self, group: GroupInfo) -> None:
        """Drop what reverted attempts recorded for the group's descendants."""
        for below in group.walk():
            if below is not group:
                self.where.pop(below, None)
                self.claims.pop(below, None)
                self.sealed.discard(below)
                self.frozen.discard(below)
