"""Elastic pods, after every mandatory pod of the gang is placed (the Placer's elastic phase).

Every placed leaf's elastic pods go into its own domain first; a home domain that leaves some out is
packed exactly (packing.py) when that places at least as many pods in all; then the rest climb one level
at a time and the extra subgroups beyond minSubGroup are placed, never outside a required domain."""
from __future__ import annotations

import numpy as np

from .demand import GroupInfo, required_ceiling
from .fill import select
from .packing import repack

UNLIMITED = 1 << 62


class ElasticPhase:
    """Mixed into Placer: uses its state, layout, place_group and bookkeeping."""

    def place_elastic(self, root: GroupInfo) -> int:
        """Every placed leaf's elastic pods in its own domain, then the rest one level up at a time and
        the extra subgroups: a leaf climbing out of its domain does not take a later sibling's room."""
        if root in self.frozen:
            return 0
        at_home = self._elastic(root, *self.where[root], UNLIMITED, climb=False)
        crowded = self._crowded_homes(root)
        if not crowded:
            return at_home + self._elastic(root, *self.where[root], UNLIMITED)
        return at_home + self._repacked(root, crowded)

    def _repacked(self, root: GroupInfo, crowded: dict[tuple[int, int], list[GroupInfo]]) -> int:
        """The rest of the elastic pods after packing the crowded home domains exactly (packing.py),
        unless that places fewer pods in all than the greedy fill: then as before."""
        mark, saved = self.state.mark(), self._bookkeeping()
        self._elastic(root, *self.where[root], UNLIMITED)
        greedy = self.state.placed_count
        self.state.revert(mark)
        self._restore(saved)
        gained = sum(repack(self.state, leaves, level, domain) for (level, domain), leaves in crowded.items())
        if gained:
            placed = gained + self._elastic(root, *self.where[root], UNLIMITED)
            if self.state.placed_count >= greedy:
                return placed
            self.state.revert(mark)
            self._restore(saved)
        return self._elastic(root, *self.where[root], UNLIMITED)

    def _crowded_homes(self, root: GroupInfo) -> dict[tuple[int, int], list[GroupInfo]]:
        """Placed leaves (no running pods) by their own domain, for the domains where some of them
        still wait with elastic pods; only under a policy that packs elastic pods (binpack) and without
        exclusive domains."""
        if not self.policy.packs_elastic or self.claims or self.held:
            return {}
        homes: dict[tuple[int, int], list[GroupInfo]] = {}
        for leaf in root.walk():
            if leaf.is_leaf and leaf in self.where and leaf not in self.frozen and not leaf.bound:
                homes.setdefault(self._home(leaf), []).append(leaf)
        node_of = self.state.node_of
        return {home: leaves for home, leaves in homes.items()
                if any((node_of[ids] < 0).any() for leaf in leaves for _, ids in leaf.optional)}

    def _bookkeeping(self) -> tuple:
        return (dict(self.where), dict(self.claims), set(self.sealed), set(self.frozen), dict(self.targets),
                dict(self.pack_targets), self.tried)

    def _restore(self, saved: tuple) -> None:
        where, claims, sealed, frozen, targets, pack_targets, self.tried = saved
        for mine, kept in ((self.where, where), (self.claims, claims), (self.sealed, sealed),
                           (self.frozen, frozen), (self.targets, targets), (self.pack_targets, pack_targets)):
            mine.clear()
            mine.update(kept)

    def _elastic(self, group: GroupInfo, level: int, domain: int, limit: int, climb: bool = True) -> int:
        """Up to `limit` more pods in the subtree: elastic pods of placed leaves, then subgroups beyond
        minSubGroup, each inside its own domain first and never outside a required one (without
        `climb`: only placed leaves, only inside their own domain)."""
        if group.is_leaf:
            return self._extra_pods(group, limit, climb=climb)
        placed = 0
        for child in group.children:
            if placed >= limit:
                break
            if child in self.frozen:
                continue
            if child in self.where:
                placed += self._elastic(child, *self.where[child], limit - placed, climb)
                continue
            if not climb:
                continue
            before = self.pods_in(child)
            if self.place_group(child, *self._elastic_scope(group, level, domain)):
                placed += self.pods_in(child) - before
                if child not in self.frozen:
                    placed += self._elastic(child, *self.where[child], limit - placed)
        return placed

    def _elastic_scope(self, group: GroupInfo, level: int, domain: int) -> tuple[int, int]:
        """Elastic pods may go anywhere inside the nearest required domain (the whole cluster if none);
        the ladder and the sibling order keep them close to the rest."""
        ceiling = required_ceiling(group)
        if ceiling >= level:
            return level, domain
        return ceiling, (int(self.layout.ancestors(level, ceiling)[domain]) if ceiling >= 0 else 0)

    def _extra_pods(self, leaf: GroupInfo, limit: int, pods: list[tuple[str, np.ndarray]] | None = None,
                    climb: bool = True) -> int:
        node_of = self.state.node_of
        waiting = []
        for role, ids in leaf.optional if pods is None else pods:
            ids = ids[node_of[ids] < 0][:limit]
            limit -= ids.size
            if ids.size:
                waiting.append((role, ids))
        if not waiting:
            return 0
        changes = self._open_for(leaf)
        placed = 0
        level, domain = self.where[leaf]
        ceiling = required_ceiling(leaf)
        top = ceiling if climb else self._home_level(leaf, level, ceiling)
        for step in range(level, top - 1, -1):
            around = int(self.layout.ancestors(level, step)[domain]) if step >= 0 else 0
            rest = []
            for role, ids in waiting:
                nodes, pods = select(self.state, role, step, around, ids.size, self.policy, partial=True)
                count = int(pods.sum())
                if count:
                    self.state.place(role, nodes, pods, ids[:count])
                    placed += count
                if count < ids.size:
                    rest.append((role, ids[count:]))
            waiting = rest
            if not waiting:
                break
        self._undo(changes)
        return placed

    @staticmethod
    def _home_level(leaf: GroupInfo, level: int, ceiling: int) -> int:
        """The level of the leaf's own domain: the one it asked for (it may have been placed in a finer
        one), never above its required ceiling."""
        own = leaf.own_level
        return level if own is None or own > level else max(own, ceiling)

    def _open_for(self, leaf: GroupInfo) -> list[tuple[np.ndarray, bool]]:
        """Show the exclusive domains of the leaf's ancestors, keeping every other group's hidden
        (they may nest); returns what changed, to undo."""
        if not self.claims and not self.held:
            return []
        mine = [g for g in leaf.ancestors() if g in self.claims or g in self.held]
        changes = [(self.state.block(self.claims.get(g, self.held.get(g)), False), False) for g in mine]
        for group, nodes in list(self.claims.items()) + list(self.held.items()):
            if group not in mine:
                changes.append((self.state.block(nodes, True), True))
        return changes
