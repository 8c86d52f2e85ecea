"""The candidate node names of a filter or prioritize request: thousands of them on every call, so
nothing here loops over them in Python.

- all_strings: the wire check of `NodeNames` in one C call (pydantic's per-item validation costs more
  than the whole pass-through filter); a list that fails it is validated by the model for the error.
- candidate_mask: the bool mask over the cluster's nodes, kept for the last list and cluster index
  (kube-scheduler offers the same nodes call after call; an equal list is one C-speed comparison)."""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np


def all_strings(names) -> bool:
    """True when `names` is a list of strings only."""
    if type(names) is not list:
        return False
    try:
        "".join(names)
    except TypeError:
        return False
    return True


class _LastMask:
    def __init__(self):
        self.lock = threading.Lock()
        self.names: list[str] | None = None
        self.index: Mapping[str, int] | None = None
        self.mask: np.ndarray | None = None


_last = _LastMask()


def candidate_mask(names: Sequence[str], index: Mapping[str, int], size: int) -> np.ndarray:
    """A fresh bool mask over the cluster's nodes (`index`: name -> node) of the names offered;
    unknown names are skipped."""
    with _last.lock:
        if _last.index is index and _last.mask is not None and len(_last.mask) == size and _last.names == names:
            return _last.mask.copy()
    mask = np.zeros(size, dtype=bool)
    mask[[index[name] for name in names if name in index]] = True
    with _last.lock:
        _last.names, _last.index, _last.mask = list(names), index, mask.copy()
    return mask
