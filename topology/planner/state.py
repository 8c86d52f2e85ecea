"""The planner's scratch state: a private free matrix, how many pods of each role fit on every node and
in every domain, and an undo log so a candidate domain that fails costs nothing afterwards."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .layout import Layout

NO_SLOTS = np.empty(0, dtype=np.int64)   # no slot ids: room taken or given back by no pod of the gang
FIT_CAP = 1 << 30          # a role requesting nothing fits "unboundedly"; keep sums exact


class State:
    def __init__(self, layout: Layout, free: np.ndarray, requests: Mapping[str, np.ndarray],
                 usable: Mapping[str, np.ndarray], slot_count: int = 0, per_node: Mapping[str, int] | None = None,
                 one_per_domain: Mapping[str, int] | None = None, links=()):
        self.layout = layout
        self.links = links                   # Links (topology/dra_requests.py): columns one placement lowers together
        self.per_node = dict(per_node or {})                          # role -> most of its pods on one node
        self.limited = np.zeros(layout.node_count, dtype=np.int64)   # pods of those roles per node
        # role -> (level, pods of the role per domain of that level): one pod per domain
        self.apart = {role: (level, np.zeros(layout.size(level), dtype=np.int64))
                      for role, level in (one_per_domain or {}).items() if 0 <= level < layout.depth}
        self.free = np.array(free, dtype=np.int64, copy=True)
        self.roles = list(requests)
        self.request = {role: np.asarray(requests[role], dtype=np.int64) for role in self.roles}
        self.columns = {role: np.flatnonzero(self.request[role] > 0) for role in self.roles}
        self.linked = {role for role in self.roles if links and links.touches(self.request[role])}
        self.allowed = {role: np.asarray(usable[role], dtype=bool) & layout.member for role in self.roles}
        self.blocked = np.zeros(layout.node_count, dtype=bool)
        self.gang = np.zeros(layout.node_count, dtype=np.int64)      # this gang's pods per node
        self.node_of = np.full(slot_count, -1, dtype=np.int64)      # slot id -> node, -1 unplaced
        self.fit: dict[str, np.ndarray] = {}
        self.counts: dict[str, list[np.ndarray]] = {}               # role -> per level 0..depth
        self.total: dict[str, int] = {}
        alike: dict[tuple, str] = {}         # roles asking the same of the same nodes count alike
        self.twin: dict[str, str] = {}       # role -> a role whose pods are interchangeable with its own
        for role in self.roles:
            key = (self.request[role].tobytes(), self.allowed[role].tobytes(), role in self.per_node,
                   role in self.apart)
            twin = alike.setdefault(key, role)
            self.twin[role] = role if role in self.per_node or role in self.apart else twin
            if twin is role or role in self.apart:
                self._recount(role)
            else:
                self.fit[role] = self.fit[twin].copy()
                # the last entry (single nodes) is the fit array itself, updated with it
                self.counts[role] = [counts.copy() for counts in self.counts[twin][:-1]] + [self.fit[role]]
                self.total[role] = self.total[twin]
        self._log: list[tuple] = []
        self.version = 0                     # changes whenever a count may have changed
        self.memo: dict = {}                 # derived per-domain figures of this version (joint.py)

    def _recount(self, role: str) -> None:
        fit = self._fit(role, np.arange(self.layout.node_count))
        self.fit[role] = fit
        self.counts[role] = self._sum_levels(fit, self.apart.get(role))
        self.total[role] = int(fit.sum()) if role not in self.apart else int(self.counts[role][0].sum())

    # --- counts ----------------------------------------------------------------------------------------
    def _fit(self, role: str, nodes: np.ndarray) -> np.ndarray:
        columns = self.columns[role]
        if columns.size == 0:
            fit = np.full(nodes.size, FIT_CAP, dtype=np.int64)
        else:
            fit = (np.maximum(self.free[nodes][:, columns], 0) // self.request[role][columns]).min(axis=1)
            fit = np.minimum(fit, FIT_CAP)
        if role in self.per_node:
            fit = np.minimum(fit, np.maximum(self.per_node[role] - self.limited[nodes], 0))
        if role in self.apart:
            level, placed = self.apart[role]
            owner = self.layout.node_domain[level][nodes]
            fit = np.where(owner >= 0, np.minimum(fit, np.maximum(1 - placed[np.maximum(owner, 0)], 0)), 0)
        return np.where(self.allowed[role][nodes] & ~self.blocked[nodes], fit, 0)

    def _sum_levels(self, fit: np.ndarray, apart: tuple[int, np.ndarray] | None = None) -> list[np.ndarray]:
        """Pods that fit per domain of every level. A role kept one per domain of a level counts at most
        one in such a domain or any domain inside it, and the sum of those above it."""
        layout = self.layout
        sums = []
        for level in range(layout.depth):
            sums.append(np.bincount(layout.node_domain[level][layout.member], weights=fit[layout.member],
                                    minlength=layout.size(level)).astype(np.int64))
        if apart is not None:
            cap = apart[0]
            for level in range(cap, layout.depth):      # a domain of that level, or inside one: one pod
                sums[level] = np.minimum(sums[level], 1)
            for level in range(cap - 1, -1, -1):
                sums[level] = np.bincount(layout.ancestors(cap, level), weights=sums[cap],
                                          minlength=layout.size(level)).astype(np.int64)
        sums.append(fit)
        return sums

    def most(self, role: str, level: int) -> int:
        """The most pods of the role that fit in one domain of the level (kept until a count changes)."""
        key = ("most", role, level)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self.total[role] if level < 0 else int(self.counts[role][level].max(initial=0))
        return found

    def count(self, role: str, level: int, domains) -> np.ndarray | int:
        if level < 0:
            return self.total[role] if np.ndim(domains) == 0 else np.full(np.size(domains), self.total[role])
        return self.counts[role][level][domains]

    def _refresh(self, nodes: np.ndarray) -> None:
        self.version += 1
        if self.memo:
            self.memo.clear()
        layout = self.layout
        for role in self.roles:
            if role in self.apart:          # a placement changes what fits in whole domains: count again
                self._recount(role)
                continue
            old = self.fit[role][nodes]
            new = self._fit(role, nodes)
            delta = new - old
            if not delta.any():
                continue
            self.fit[role][nodes] = new
            for level in range(layout.depth):
                np.add.at(self.counts[role][level], layout.node_domain[level][nodes], delta)
            self.total[role] += int(delta.sum())

    # --- changes (all undoable) -------------------------------------------------------------------------
    def place(self, role: str, nodes: np.ndarray, pods: np.ndarray, ids: np.ndarray) -> None:
        """Put pods[i] pods of `role` on nodes[i] (nodes distinct), assigning slot `ids` in node order
        (no ids: room held back for a phantom pod, or given back with a negative count)."""
        self._apply(role, nodes, pods, 1)
        if ids.size:
            self.node_of[ids] = np.repeat(nodes, pods)
        self._log.append(("place", role, nodes, pods, ids))

    def unplace(self, role: str, ids: np.ndarray) -> None:
        """Take placed slots of `role` off their nodes (to place them again elsewhere)."""
        nodes = self.node_of[ids].copy()
        where, pods = np.unique(nodes, return_counts=True)
        self._apply(role, where, pods, -1)
        self.node_of[ids] = -1
        self._log.append(("unplace", role, ids, nodes))

    def _apply(self, role: str, nodes: np.ndarray, pods: np.ndarray, sign: int) -> None:
        taken = pods[:, None] * self.request[role][None, :]
        if role in self.linked:
            taken = self.links.apply(nodes, taken)
        self.free[nodes] -= sign * taken
        self.gang[nodes] += sign * pods
        if role in self.per_node:
            self.limited[nodes] += sign * pods
        if role in self.apart:
            level, placed = self.apart[role]
            owner = self.layout.node_domain[level][nodes]
            np.add.at(placed, owner[owner >= 0], sign * pods[owner >= 0])
        self._refresh(nodes)

    def block(self, nodes: np.ndarray, value: bool = True) -> np.ndarray:
        """Hide nodes from every role (an exclusive domain claimed by one group), or show them again;
        returns the nodes that changed."""
        changed = nodes[self.blocked[nodes] != value]
        if changed.size:
            self.blocked[changed] = value
            self._refresh(changed)
            self._log.append(("block", changed, value))
        return changed

    def mark(self) -> int:
        return len(self._log)

    def revert(self, mark: int) -> None:
        while len(self._log) > mark:
            entry = self._log.pop()
            if entry[0] == "place":
                _, role, nodes, pods, ids = entry
                self.node_of[ids] = -1
                self._apply(role, nodes, pods, -1)
            elif entry[0] == "unplace":
                _, role, ids, nodes = entry
                where, pods = np.unique(nodes, return_counts=True)
                self._apply(role, where, pods, 1)
                self.node_of[ids] = nodes
            else:
                _, nodes, value = entry
                self.blocked[nodes] = not value
                self._refresh(nodes)

    def add_bound(self, slot_id: int, node: int, role: str | None = None) -> None:
        """A running pod of this gang: already counted in `free`, recorded so it pins its groups."""
        self.node_of[slot_id] = node
        self.gang[node] += 1
        if role in self.per_node:
            self.limited[node] += 1
            self._refresh(np.array([node]))
        if role in self.apart:
            level, placed = self.apart[role]
            owner = int(self.layout.node_domain[level][node])
            if owner >= 0:
                placed[owner] += 1
            self._refresh(np.array([node]))

    @property
    def placed_count(self) -> int:
        return int(np.count_nonzero(self.node_of >= 0))
