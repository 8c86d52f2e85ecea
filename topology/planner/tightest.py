"""Which children hold the pods when no single one does, under binpack: the fewest children that can,
and of those sets the tightest (the least room in all). Taking the largest children first (Kueue's
greedy, and ours until 2026-11-25) uses a block's whole free racks when partly used racks would hold the
pods in as many racks: 14 pods in racks with room for 8, 7 and 7 took the free rack of 8 and one of 7;
now both racks of 7, and the free rack stays whole for a later gang of segments that needs it.
Exact over every set while there are few (a domain has a handful of children), else each child in
turn the tightest that still lets the fewest children hold the rest."""
from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations

import numpy as np

MAX_SETS = 512             # exact search over at most this many sets of children


@lru_cache(maxsize=256)
def _sets(children: int, size: int) -> np.ndarray:
    return np.array(list(combinations(range(children), size)), dtype=np.int64)


def tightest_set(room: np.ndarray, need: int, size: int) -> np.ndarray:
    """Positions in `room` of `size` children holding `need` pods with the least room in all (ties: the
    first set in tree order); `size` is the fewest that can (the `size` largest hold `need`)."""
    if size >= room.size:
        return np.arange(room.size)
    holding = np.flatnonzero(room > 0)
    if holding.size and room[holding].min() == room[holding].max():
        return holding[:size]          # alike children (nodes of one type): every set is as tight
    if math.comb(room.size, size) <= MAX_SETS:
        sets = _sets(room.size, size)
        totals = room[sets].sum(axis=1)
        totals = np.where(totals >= need, totals, np.iinfo(np.int64).max)
        return sets[int(np.argmin(totals))]
    return _tightest_child_by_child(room, need, size)


def _tightest_child_by_child(room: np.ndarray, need: int, size: int) -> np.ndarray:
    """Each pick the tightest child (tree order on ties) after which the `rest` largest other free
    children still hold what is left: the `rest` largest overall, with the next largest in place of the
    child when its room is among theirs (one sort a pick, not one a child)."""
    picks: list[int] = []
    free = np.ones(room.size, dtype=bool)
    left = need
    for taken in range(size):
        rest = size - taken - 1                 # children still to pick after this one
        candidates = np.flatnonzero(free)[np.argsort(room[free], kind="stable")]
        if rest:
            largest = np.sort(room[free])[::-1]
            among = room[candidates] >= largest[rest - 1]
            others = np.where(among, largest[:rest].sum() - room[candidates] + largest[rest], largest[:rest].sum())
        else:
            others = np.zeros(candidates.size, dtype=np.int64)
        child = int(candidates[np.argmax(room[candidates] + others >= left)])
        picks.append(child)
        free[child] = False
        left -= int(room[child])
    return np.array(picks, dtype=np.int64)
