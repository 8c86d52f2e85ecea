"""Segments allotted to the fewest domains at every level, exactly (issue 15 item 2).

`segments._split` takes Kueue's BestFit level by level: at each level the fewest domains, but how many
segments each of them takes is fixed before the level below is looked at, so the same number of
domains can need more below than another split would (racks holding 4 and 1 segments take three hosts
where racks holding 3 and 2 take two). Here a dynamic program over the tree inside the group's domain
finds, for every domain and every number of segments, the fewest domains used at each level below it,
the coarsest level first, then the tightest fit (the least room in the segment-level domains used).

Each choice is scored by one integer: the domains used per level as digits of base `count + 1`, the
coarsest level the most significant, the room used as the last digit. The order of those integers is
the order of the vectors, and it survives addition, so the best split of a domain is built from the
best tables of its children (a min-plus convolution per child). It runs when the tree is small (at
most BUDGET table cells); larger allotments keep the greedy one."""
from __future__ import annotations

import numpy as np

from .layout import Layout

BUDGET = 50_000              # domains x (segments + 1)^2, at most
_FAR = np.iinfo(np.int64).max // 4


def fewest_domains(layout: Layout, unit_level: int, per_unit: np.ndarray, level: int, domain: int,
                   count: int) -> list[int] | None:
    """The segment-level domains (one entry a segment) for `count` segments inside (level, domain), each
    segment-level domain holding `per_unit` of them; None when they do not fit or the tree is too large
    for the exact search (the caller then takes the greedy allotment)."""
    if unit_level - level <= 1:           # one level down, the roomiest first is already the fewest
        return None
    units = np.flatnonzero((layout.ancestors(unit_level, level) == domain) & (per_unit > 0))
    weights = _weights(layout, unit_level, per_unit, level, units, count)
    search = _Search(units, per_unit, weights, layout, unit_level, level, count) if weights else None
    taken = search.run() if search is not None else None
    if taken is None:
        return None
    order = np.lexsort([units, -taken])
    return [int(units[i]) for i in order.tolist() for _ in range(int(taken[i]))]


def _weights(layout: Layout, unit_level: int, per_unit: np.ndarray, level: int, units: np.ndarray,
             count: int) -> list[int] | None:
    """The score of one domain used at each level below `level` (coarsest first); None when the tables
    would exceed BUDGET cells or the scores an int64."""
    levels = range(level + 1, unit_level + 1)
    cells = sum(len(np.unique(layout.ancestors(unit_level, below)[units])) for below in levels) * (count + 1) ** 2
    base, room_base = count + 1, int(np.minimum(per_unit[units], count).sum()) + 1
    if count <= 0 or cells > BUDGET or base ** len(levels) * room_base >= _FAR:
        return None
    return [base ** (len(levels) - 1 - depth) * room_base for depth in range(len(levels))]


class _Search:
    """Tables of the best score per number of segments, bottom-up; then the counts per unit, top-down."""

    def __init__(self, units: np.ndarray, per_unit: np.ndarray, weights: list[int], layout: Layout,
                 unit_level: int, level: int, count: int):
        self.units, self.weights, self.count = units, weights, count
        self.capacity = np.minimum(per_unit[units], count).astype(np.int64)
        self.owners = [layout.ancestors(unit_level, below)[units] for below in range(level + 1, unit_level + 1)]
        self.choices: dict[tuple[int, int], list[np.ndarray]] = {}     # (depth, domain) -> per child: its share

    def best_score(self) -> int | None:
        """The score of the best allotment; None when the segments do not fit."""
        if int(self.capacity.sum()) < self.count:
            return None
        table = self._children(-1, -1, np.arange(len(self.units)))
        if table.size <= self.count or table[self.count] >= _FAR:
            return None
        return int(table[self.count])

    def run(self) -> np.ndarray | None:
        """Segments per unit of the best allotment (None: they do not fit)."""
        if self.best_score() is None:
            return None
        members = np.arange(len(self.units))
        taken = np.zeros(len(self.units), dtype=np.int64)
        self._assign(-1, -1, members, self.count, taken)
        return taken

    def _table(self, depth: int, domain: int, members: np.ndarray) -> np.ndarray:
        """Best score for 0.. segments inside (depth, domain), the domain itself counted when used."""
        if depth == len(self.owners) - 1:                     # a segment-level domain: one unit
            unit = int(members[0])
            table = np.full(int(self.capacity[unit]) + 1, self.weights[depth] + int(self.capacity[unit]),
                            dtype=np.int64)
        else:
            table = self._children(depth, domain, members)
            table[1:] = np.where(table[1:] < _FAR, table[1:] + self.weights[depth], _FAR)
        table[0] = 0
        return table

    def _children(self, depth: int, domain: int, members: np.ndarray) -> np.ndarray:
        """Min-plus convolution of the children's tables; remembers each child's best share."""
        best = np.zeros(1, dtype=np.int64)
        shares = []
        for child, inner in self._split_members(depth, members):
            best, share = _convolve(best, self._table(depth + 1, child, inner), self.count)
            shares.append(share)
        self.choices[(depth, domain)] = shares
        return best

    def _split_members(self, depth: int, members: np.ndarray) -> list[tuple[int, np.ndarray]]:
        owner = self.owners[depth + 1][members]
        return [(int(child), members[owner == child]) for child in np.unique(owner)]

    def _assign(self, depth: int, domain: int, members: np.ndarray, wanted: int, taken: np.ndarray) -> None:
        if depth == len(self.owners) - 1:
            taken[int(members[0])] = wanted
            return
        children = self._split_members(depth, members)
        shares = self.choices[(depth, domain)]
        for (child, inner), share in reversed(list(zip(children, shares))):
            part = int(share[wanted])
            wanted -= part
            self._assign(depth + 1, child, inner, part, taken)


def _convolve(best: np.ndarray, table: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """merged[j] = min over k of best[j - k] + table[k], for j up to `count`, and the k of each minimum
    (the smallest on ties), in one array operation."""
    size = min(len(best) + len(table) - 1, count + 1)
    source = np.arange(size)[None, :] - np.arange(len(table))[:, None]
    valid = (source >= 0) & (source < len(best))
    scores = np.where(valid, best[np.clip(source, 0, len(best) - 1)] + table[:, None], _FAR)
    share = np.argmin(scores, axis=0)
    return np.minimum(scores[share, np.arange(size)], _FAR), share
