"""Which of equally fitting candidate domains keeps the cluster's largest holes: the one holding the
fewest of them. A hole is a domain with the most room for the group's pods of any domain of its level
(a rack of free nodes where the roomiest racks are racks of free nodes); a large gang of segments needs
many such racks at once.

Binpack ranks candidates by their leftover room, then their parents' room, and of domains equal in
both took the first by name. On the quality benchmark (seed 1, at 12.06 h) a gang of 64 pods in
block-level segments had two zones with the same leftover; it went into zone 0, which had 7 free racks,
not zone 1 with 5, and broke 5 free racks instead of 3: no gang of 64 pods in rack segments fitted
anywhere until it ended, and the large jobs of the trace's tail ran one after the other. Now, of
candidates tied on every other key, the one with the fewest holes below it, at each level below
(coarsest first), comes first; the domain keeping the most free racks stays whole."""
from __future__ import annotations

import numpy as np

from .state import State


def holes_below(state: State, role: str, level: int, domains: np.ndarray) -> list[np.ndarray]:
    """Per domain of `level`, how many domains of each level below it (coarsest first, single nodes
    last) have the most room for `role` of any domain of their level."""
    layout = state.layout
    keys = []
    for below in range(level + 1, layout.depth + 1):
        largest = state.most(role, below)
        if largest <= 0:                 # nothing of that level has room: no holes to keep
            keys.append(np.zeros(len(domains), dtype=np.int64))
            continue
        owner = layout.ancestors(below, level)
        holes = (state.counts[role][below] == largest) & (owner >= 0)
        keys.append(np.bincount(owner[holes], minlength=layout.size(level))[domains])
    return keys


def fewest_holes_first(state: State, role: str, level: int, domains: np.ndarray, keys: list[np.ndarray],
                       order: np.ndarray) -> np.ndarray:
    """`order` (np.lexsort(keys), keys[0] the domains themselves, the last tie-break) with the domains
    tied on every other key ranked by their holes first. Holes are counted only when some are tied."""
    ranked = np.stack(keys[1:])[:, order] if len(keys) > 1 else np.zeros((1, len(order)))
    same = (ranked[:, 1:] == ranked[:, :-1]).all(axis=0)
    if not same.any():
        return order
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    holes = [np.zeros(len(domains), dtype=np.int64) for _ in range(level + 1, state.layout.depth + 1)]
    for full, part in zip(holes, holes_below(state, role, level, domains[order[tied]])):
        full[order[tied]] = part
    return np.lexsort([keys[0], *reversed(holes), *keys[1:]])
