"""Choosing nodes for the pods of one role inside one domain: descend the tree, at each step taking the
tightest child that holds every pod (binpack) or the emptiest (spread); when none does, the fewest
children that do, largest first, the last one the tightest that covers the rest. Nodes come back in tree
order so consecutive pod indexes land on the same or neighbouring nodes."""
from __future__ import annotations

import numpy as np

from .state import State


def select(state: State, role: str, level: int, domain: int, need: int, spread: bool = False,
           partial: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """(nodes, pods per node) for `need` pods of `role` inside the domain, nodes in tree order; None when
    they do not fit (with `partial`, as many as fit)."""
    available = int(state.count(role, level, domain))
    if available < need and not partial:
        return None
    need = min(need, available)
    if need <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    _descend(state, role, level, domain, need, spread, parts)
    nodes = np.concatenate([p[0] for p in parts])
    pods = np.concatenate([p[1] for p in parts])
    order = np.argsort(state.layout.position[nodes], kind="stable")
    return nodes[order], pods[order]


def _descend(state: State, role: str, level: int, domain: int, need: int, spread: bool,
             parts: list[tuple[np.ndarray, np.ndarray]]) -> None:
    layout = state.layout
    if level == layout.depth:
        parts.append((np.array([domain], dtype=np.int64), np.array([need], dtype=np.int64)))
        return
    kids = layout.inside(level, domain, level + 1)
    room = state.counts[role][level + 1][kids]
    whole, split = [], []
    for kid, share in _split(room, need, spread):
        (whole if share == room[kid] else split).append((int(kids[kid]), share))
    if whole:
        # children taken whole: every node in them with room, in one vectorized step
        taken = np.array([kid for kid, _ in whole], dtype=np.int64)
        fit = state.fit[role]
        if level + 1 == layout.depth:
            parts.append((taken, fit[taken]))
        else:
            members = layout.inside(level, domain, layout.depth)
            members = members[np.isin(layout.ancestors(layout.depth, level + 1)[members], taken)]
            members = members[fit[members] > 0]
            parts.append((members, fit[members]))
    for kid, share in split:
        _descend(state, role, level + 1, kid, share, spread, parts)


def _split(room: np.ndarray, need: int, spread: bool) -> list[tuple[int, int]]:
    """Which children (positions in `room`) take how many pods, in tree order."""
    whole = np.flatnonzero(room >= need)
    if whole.size:
        pick = whole[np.argmax(room[whole])] if spread else whole[np.argmin(room[whole])]
        return [(int(pick), need)]
    order = np.argsort(-room, kind="stable")
    taken = np.cumsum(room[order])
    full = int(np.searchsorted(taken, need))          # order[:full] are taken whole
    shares = [(int(order[i]), int(room[order[i]])) for i in range(full)]
    rest = need - (int(taken[full - 1]) if full else 0)
    if rest > 0:
        others = order[full:]
        covering = others[room[others] >= rest]
        last = covering[np.argmin(room[covering])] if covering.size and not spread else others[0]
        shares.append((int(last), rest))
    return sorted(shares)
