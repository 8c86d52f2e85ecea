"""How close a candidate domain keeps a group to its siblings: the ranking key that keeps a gang's
groups in the domains the gang already uses.

A group's candidates used to be ranked by the ancestors they share with the last placed sibling
alone (segment i+1 next to segment i). When that sibling sits in the one domain the allotment sent to
another block or zone, the next group followed it there and took a new block (and often a whole free
rack) while a domain the earlier siblings already use had room that fits it tighter. Counting the
domains of every placed sibling ranks a candidate by the new domains it adds to the gang, coarsest
first, as the plan's ranking counts them; the last sibling only breaks ties."""
from __future__ import annotations

import numpy as np

from .layout import Layout


def shared_levels(layout: Layout, level: int, domains: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """For each domain of `level`: at how many levels, from the coarsest down to its own, its ancestor
    (or itself) holds one of `nodes`. Domains nest, so this is the depth of its finest ancestor already
    in use: a domain with more levels shared adds fewer new domains to the gang."""
    shared = np.zeros(len(domains), dtype=np.int64)
    if not nodes.size:
        return shared
    for above in range(level + 1):
        owners = layout.node_domain[above][nodes]
        used = np.zeros(layout.size(above), dtype=bool)
        used[owners[owners >= 0]] = True
        ancestors = layout.ancestors(level, above)[domains]
        shared += (ancestors >= 0) & used[ancestors]
    return shared
