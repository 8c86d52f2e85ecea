"""The ranking of a placement, best first, compared in order: the level the whole group spans, the level
its segments span (both as heights above a single node, lower is better), the domains used at each level
(coarsest first), the leftover capacity of the chosen domain as the placement policy ranks it (binpack:
tightest first; spread: emptiest first), and the domain name. Also the per-group placements reported in a Plan."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..plan import GroupPlacement
from .demand import GroupInfo
from .layout import ROOT, Layout
from .policies import PlacementPolicy
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
    return tuple(len(set(layout.node_domain[level][nodes].tolist())) for level in range(layout.depth))


def rank_of(layout: Layout, state: State, root: GroupInfo, where: tuple[int, int], policy: PlacementPolicy,
            nodes_of, spans: dict | None = None) -> tuple:
    """`spans`: leaf_spans of the plan, if already measured."""
    nodes = nodes_of(root)
    spans = leaf_spans(layout, [g for g in root.walk() if g.is_leaf and g.ids.size], state.node_of) \
        if spans is None else spans
    segments = [layout.depth - spans[g][0] if g in spans else layout.depth - ROOT for g in root.walk()
                if g.is_leaf and g.group.segment is not None and g.ids.size]
    level, domain = where
    leftover = sum(int(state.count(role, level, domain)) for role in state.roles)
    return (span_height(layout, nodes), max(segments, default=0), domains_used(layout, nodes),
            policy.tightness(leftover), layout.domain_id(level, domain))


def placements(layout: Layout, root: GroupInfo, node_of: np.ndarray, node_names: Sequence[str],
               measured: dict | None = None) -> dict[str, GroupPlacement]:
    """Where each group went (`node_of`: slot id -> node, -1 unplaced); a group on one node is named by
    that node (a gang without a topology too, whose layout knows no names); `measured`: leaf_spans of the
    plan, if already measured."""
    result: dict[str, GroupPlacement] = {}
    if measured is None:
        measured = leaf_spans(layout, [g for g in root.walk() if g.is_leaf and g.ids.size], node_of)
    names = [layout.level_name(level) for level in range(layout.depth)]
    for group in root.walk():
        if group in measured:
            level, domain, used, pods = measured[group]
        else:
            nodes = node_of[group.ids]
            nodes = nodes[nodes >= 0]
            if not nodes.size:
                result[group.name] = GroupPlacement(group.name)
                continue
            (level, domain), used, pods = common_level(layout, nodes), domains_used(layout, nodes), int(nodes.size)
        name = None if level == ROOT else layout.level_name(level)
        where = node_names[domain] if level == layout.depth else None if level == ROOT \
            else layout.domain_id(level, domain)
        result[group.name] = GroupPlacement(
            group.name, name, where,
            {names[l]: n for l, n in enumerate(used)}, pods)
    return result


def leaf_spans(layout: Layout, leaves: list[GroupInfo], node_of: np.ndarray) -> dict:
    """leaf -> (common level, its domain, domains used per level, pods) for leaves with placed pods,
    all measured at once (a leaf's slot ids are consecutive; a big gang is mostly leaves)."""
    if not leaves:
        return {}
    ids = np.concatenate([leaf.ids for leaf in leaves])
    owner = np.repeat(np.arange(len(leaves)), [leaf.ids.size for leaf in leaves])
    nodes = node_of[ids]
    placed = nodes >= 0
    owner, nodes = owner[placed], nodes[placed]
    pods = np.bincount(owner, minlength=len(leaves))
    first = np.full(len(leaves), -1, dtype=np.int64)
    first[owner[::-1]] = nodes[::-1]                   # a placed node of each leaf
    counts = []
    for level in range(layout.depth + 1):              # depth: the nodes themselves
        domain = layout.node_domain[level][nodes] if level < layout.depth else nodes
        keys = np.unique(owner * (int(domain.max(initial=0)) + 2) + domain + 1)
        counts.append(np.bincount(keys // (int(domain.max(initial=0)) + 2), minlength=len(leaves)))
    spans = {}
    depth = layout.depth                               # below: Python ints, one conversion per array
    counts = [level_counts.tolist() for level_counts in counts]
    firsts = first.tolist()
    first_domain = [layout.node_domain[level][first].tolist() for level in range(depth)] + [firsts]
    for index, (leaf, placed_pods) in enumerate(zip(leaves, pods.tolist())):
        if not placed_pods:
            continue
        level = next((l for l in range(depth, -1, -1) if counts[l][index] == 1
                      and (l == depth or first_domain[l][index] >= 0)), ROOT)
        domain = first_domain[level][index] if level >= 0 else 0
        spans[leaf] = (level, domain, tuple(counts[l][index] for l in range(depth)), placed_pods)
    return spans
