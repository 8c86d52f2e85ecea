"""Choosing nodes for the pods of one role inside one domain: descend the tree one level at a time, at
each step taking the tightest child that holds every pod (binpack) or the emptiest (spread); when none
does, the fewest children that do: under binpack the tightest such set (tightest.py), under spread the
largest first. The
children at each step are those of every domain chosen at the step above, taken together, so the pods
use as few domains as possible at every level. Nodes come back in tree order so consecutive pod indexes
land on the same or neighbouring nodes."""
from __future__ import annotations

import numpy as np

from .state import State
from .tightest import tightest_set


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
    layout = state.layout
    chosen, shares = np.array([domain], dtype=np.int64), np.array([need], dtype=np.int64)
    apart = state.apart.get(role)
    for at in range(level, layout.depth):
        if apart is not None and at >= apart[0] and chosen.size > 1:
            # one pod per domain of a level: below it, each chosen domain's share stays in that domain
            chosen, shares = _split_each(state, role, at, chosen, shares, spread)
            continue
        if chosen.size == 1:
            kids = layout.inside(at, int(chosen[0]), at + 1)
        else:
            kids = layout.inside_any(at, chosen, at + 1)
        room = state.counts[role][at + 1][kids]
        kids, room = kids[room > 0], room[room > 0]
        picks, shares = _split(room, need, spread)
        chosen = kids[picks]
    order = np.argsort(layout.position[chosen], kind="stable")
    return chosen[order], shares[order]


def _split_each(state: State, role: str, at: int, chosen: np.ndarray, shares: np.ndarray,
                spread: bool) -> tuple[np.ndarray, np.ndarray]:
    """The children of each chosen domain taking that domain's own share."""
    layout = state.layout
    picked, taken = [], []
    for parent, share in zip(chosen.tolist(), shares.tolist()):
        kids = layout.inside(at, parent, at + 1)
        room = state.counts[role][at + 1][kids]
        kids, room = kids[room > 0], room[room > 0]
        picks, parts = _split(room, share, spread)
        picked.append(kids[picks])
        taken.append(parts)
    return np.concatenate(picked), np.concatenate(taken)


def _split(room: np.ndarray, need: int, spread: bool) -> tuple[np.ndarray, np.ndarray]:
    """Which children (positions in `room`) take how many pods: the tightest (binpack) or emptiest
    (spread) that holds them all, else the fewest that do: binpack the tightest such set, the largest
    of them taken whole first; spread the largest first."""
    whole = np.flatnonzero(room >= need)
    if whole.size:
        pick = whole[np.argmax(room[whole])] if spread else whole[np.argmin(room[whole])]
        return np.array([pick]), np.array([need], dtype=np.int64)
    order = np.argsort(-room, kind="stable")
    taken = np.cumsum(room[order])
    full = int(np.searchsorted(taken, need))          # order[:full] are taken whole
    rest = need - (int(taken[full - 1]) if full else 0)
    if not spread:
        # binpack: of the fewest children that hold the pods, the tightest set (tightest.py)
        picks = tightest_set(room, need, full + (rest > 0))
        picks = picks[np.argsort(-room[picks], kind="stable")]
        shares = room[picks].copy()
        shares[-1] -= int(shares.sum()) - need
        return picks, shares
    picks, shares = order[:full], room[order[:full]]
    if rest > 0:                                      # spread: the next largest takes the rest
        picks, shares = np.append(picks, order[full]), np.append(shares, rest)
    return picks, shares
