"""Choosing nodes for the pods of one role inside one domain: descend the tree one level at a time, at
each step letting the placement policy choose which children take the pods (binpack: the tightest child
that holds them all, spread: the emptiest; when none does, the fewest children that do). The
children at each step are those of every domain chosen at the step above, taken together, so the pods
use as few domains as possible at every level. Nodes come back in tree order so consecutive pod indexes
land on the same or neighbouring nodes."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .state import State

if TYPE_CHECKING:
    from .policies import PlacementPolicy


def select(state: State, role: str, level: int, domain: int, need: int, policy: PlacementPolicy,
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
            chosen, shares = _split_each(state, role, at, chosen, shares, policy)
            continue
        if chosen.size == 1:
            kids = layout.inside(at, int(chosen[0]), at + 1)
        else:
            kids = layout.inside_any(at, chosen, at + 1)
        room = state.counts[role][at + 1][kids]
        kids, room = kids[room > 0], room[room > 0]
        picks, shares = policy.split(room, need)
        chosen = kids[picks]
    order = np.argsort(layout.position[chosen], kind="stable")
    return chosen[order], shares[order]


def _split_each(state: State, role: str, at: int, chosen: np.ndarray, shares: np.ndarray,
                policy: PlacementPolicy) -> tuple[np.ndarray, np.ndarray]:
    """The children of each chosen domain taking that domain's own share."""
    layout = state.layout
    picked, taken = [], []
    for parent, share in zip(chosen.tolist(), shares.tolist()):
        kids = layout.inside(at, parent, at + 1)
        room = state.counts[role][at + 1][kids]
        kids, room = kids[room > 0], room[room > 0]
        picks, parts = policy.split(room, share)
        picked.append(kids[picks])
        taken.append(parts)
    return np.concatenate(picked), np.concatenate(taken)
