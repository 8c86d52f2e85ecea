"""binpack (the default): the tightest place that fits first, so partly used nodes, racks and blocks fill
up and empty ones stay whole for the next big gang."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..candidates import Fit, holds_elastic
from ..holes import fewest_holes_first
from ..tightest import tightest_set


class Binpack:
    name = "binpack"
    packs_elastic = True

    def tightness(self, room):
        return room

    def order(self, fit: Fit) -> np.ndarray:
        """The house keys (Fit.keys) with the least room first, a domain that also holds the group's own
        elastic pods before a tighter one, and of domains equal on every key the one holding the fewest of
        the cluster's largest holes (holes.py)."""
        if fit.primary is None:
            return np.lexsort(fit.keys(self.tightness))
        elastic = (~holds_elastic(fit.state, fit.group, fit.level, fit.domains)).astype(np.int64)
        keys = fit.keys(self.tightness, elastic)
        order = np.lexsort(keys)
        if fit.level < 0:
            return order
        return fewest_holes_first(fit.state, fit.primary, fit.level, fit.domains, keys, order)

    def split(self, room: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray]:
        """The tightest child that holds every pod; else of the fewest children that hold them, the
        tightest set (tightest.py), the largest of them taken whole first. A pure function of the room
        and the need, and the same few shapes recur (a big gang's segments fill many alike racks, one
        select each): answered from a small cache (read-only arrays) for a domain's handful of children."""
        if room.size > MEMO_CHILDREN or room.dtype != np.int64:
            return _split(room, need)
        return _split_memo(room.tobytes(), int(need))


MEMO_CHILDREN = 64         # rooms of at most this many children are cached (the key is their bytes)


@lru_cache(maxsize=1024)
def _split_memo(room_bytes: bytes, need: int) -> tuple[np.ndarray, np.ndarray]:
    picks, shares = _split(np.frombuffer(room_bytes, dtype=np.int64), need)
    picks, shares = np.array(picks, dtype=np.int64), np.array(shares, dtype=np.int64)
    picks.flags.writeable = shares.flags.writeable = False
    return picks, shares


def _split(room: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray]:
    whole = np.flatnonzero(room >= need)
    if whole.size:
        return np.array([whole[np.argmin(room[whole])]]), np.array([need], dtype=np.int64)
    taken = np.cumsum(np.sort(room)[::-1])
    full = int(np.searchsorted(taken, need))          # this many of the largest are taken whole
    rest = need - (int(taken[full - 1]) if full else 0)
    picks = tightest_set(room, need, full + (rest > 0))
    picks = picks[np.argsort(-room[picks], kind="stable")]
    shares = room[picks].copy()
    shares[-1] -= int(shares.sum()) - need
    return picks, shares
