"""The ranking of a placement, best first, compared in order: the level the whole group spans, the level
its segments span (both as heights above a single node, lower is better), the domains used at each level
(coarsest first), the leftover capacity of the chosen domain (binpack: tightest first; spread: emptiest
first), and the domain name. Also the per-group placements reported in a Plan."""
from __future__ import annotations

import numpy as np

from ..plan import GroupPlacement
from .demand import GroupInfo
from .layout import ROOT, Layout
from .state import State


def common_level(layout: Layout, nodes: np.ndarray) -> tuple[int, int]:
    """The finest (level, domain) holding every node: (depth, node) for one node, (ROOT, 0) for none."""
    if nodes.size == 0:
        return ROOT, 0
    if (nodes == nodes[0]).all():
        return layout.depth, int(nodes[0])
    for level in range(layout.depth - 1, -1, -1):
        owners = layout.node_domain[level][nodes]
        if (owners == owners[0]).all() and owners[0] >= 0:
            return level, int(owners[0])
    return ROOT, 0


def span_height(layout: Layout, nodes: np.ndarray) -> int:
    """0 on one node, 1 within one domain of the finest level, ..., depth + 1 across level-0 domains."""
    return layout.depth - common_level(layout, nodes)[0]


def domains_used(layout: Layout, nodes: np.ndarray) -> tuple[int, ...]:
    return tuple(int(np.unique(layout.node_domain[level][nodes]).size) for level in range(layout.depth))


def rank_of(layout: Layout, state: State, root: GroupInfo, where: tuple[int, int], spread: bool,
            nodes_of) -> tuple:
    nodes = nodes_of(root)
    segments = [span_height(layout, nodes_of(g)) for g in root.walk()
                if g.is_leaf and g.group.segment is not None and g.ids.size]
    level, domain = where
    leftover = sum(int(state.count(role, level, domain)) for role in state.roles)
    return (span_height(layout, nodes), max(segments, default=0), domains_used(layout, nodes),
            -leftover if spread else leftover, layout.domain_id(level, domain))


def placements(layout: Layout, root: GroupInfo, nodes_of) -> dict[str, GroupPlacement]:
    result: dict[str, GroupPlacement] = {}
    for group in root.walk():
        nodes = nodes_of(group)
        if not nodes.size:
            result[group.name] = GroupPlacement(group.name)
            continue
        level, domain = common_level(layout, nodes)
        name = None if level == ROOT else layout.level_name(level)
        result[group.name] = GroupPlacement(
            group.name, name, None if level == ROOT else layout.domain_id(level, domain),
            {layout.level_name(l): n for l, n in enumerate(domains_used(layout, nodes))}, int(nodes.size))
    return result
