"""spread: the emptiest place that fits first, leaving room around each gang (and for its elastic pods)."""
from __future__ import annotations

import numpy as np

from ..candidates import Fit


class Spread:
    name = "spread"
    packs_elastic = False            # the emptiest domains leave room for elastic pods anyway

    def tightness(self, room):
        return -room

    def order(self, fit: Fit) -> np.ndarray:
        """The house keys (Fit.keys) with the most room first (domain, then parent, grandparent, ...)."""
        return np.lexsort(fit.keys(self.tightness))

    def split(self, room: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray]:
        """The emptiest child that holds every pod; else the largest first, the next largest taking the rest."""
        whole = np.flatnonzero(room >= need)
        if whole.size:
            return np.array([whole[np.argmax(room[whole])]]), np.array([need], dtype=np.int64)
        order = np.argsort(-room, kind="stable")
        taken = np.cumsum(room[order])
        full = int(np.searchsorted(taken, need))          # order[:full] are taken whole
        rest = need - (int(taken[full - 1]) if full else 0)
        picks, shares = order[:full], room[order[:full]]
        if rest > 0:
            picks, shares = np.append(picks, order[full]), np.append(shares, rest)
        return picks, shares
